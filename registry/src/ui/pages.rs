//! The body of each page, from data the handlers in `ui` gathered. Every value is written
//! through `Esc` or `Q` (see `html`).

use std::fmt::Write as _;

use serde_json::Value;
use validator::{Digest, Name};

use super::html::{Esc, Html, Q, age, size};
use super::{CatalogSort, ImageView, PullHost, RepoRow, STOP_TIMEOUT_LABEL, Signed, TagRow, short};
use crate::pkgindex::SearchResult;

/// The link of an image page.
fn image_href(name: &str, d: &Digest) -> String {
    format!("/ui/r/{}@{}", Esc(name), Esc(d.as_str()))
}

fn digest_link(h: &mut Html, name: &str, d: &Digest) {
    let _ = write!(
        h,
        "<a class=\"mono\" href=\"{}\" title=\"{}\">{}</a>",
        image_href(name, d),
        Esc(d.as_str()),
        Esc(short(d))
    );
}

/// A table inside a wrapper that scrolls sideways on a narrow screen.
fn table_start(h: &mut Html, caption: &str, heads: &[&str]) {
    let _ = write!(
        h,
        "<div class=\"scroll\" role=\"region\" aria-label=\"{}\" tabindex=\"0\"><table><thead><tr>",
        Esc(caption)
    );
    for t in heads {
        let _ = write!(h, "<th scope=\"col\">{}</th>", Esc(t));
    }
    h.raw("</tr></thead><tbody>");
}

fn table_end(h: &mut Html) {
    h.raw("</tbody></table></div>");
}

/// The repositories page: the filter form, one page of repositories (tags, size, last push)
/// in `sort` order with sorting links in the column heads, and the link to the next page.
pub(crate) fn catalog(
    q: &str,
    sort: CatalogSort,
    rows: &[RepoRow],
    next: Option<&str>,
    now: u64,
) -> String {
    let mut h = Html::default();
    h.raw("<form method=\"get\" action=\"/ui/\" role=\"search\">")
        .raw("<label for=\"q\">Filter repositories")
        .raw("<input id=\"q\" name=\"q\" type=\"search\" value=\"");
    h.text(q).raw("\" placeholder=\"part of a name\"></label>");
    let _ = write!(
        h,
        "<input type=\"hidden\" name=\"sort\" value=\"{}\">",
        Esc(sort.as_str())
    );
    h.raw("<button type=\"submit\">Filter</button></form>");
    if rows.is_empty() {
        h.raw("<p>No repositories");
        if !q.is_empty() {
            let _ = write!(h, " match <q>{}</q>", Esc(q));
        }
        h.raw(".</p>");
        return h.into_string();
    }
    let _ = write!(
        h,
        "<div class=\"scroll\" role=\"region\" aria-label=\"Repositories\" tabindex=\"0\"><table><thead><tr>"
    );
    for (label, key) in [
        ("Repository", CatalogSort::Name),
        ("Tags", CatalogSort::Tags),
        ("Size", CatalogSort::Size),
        ("Last push", CatalogSort::Pushed),
    ] {
        if key == sort {
            let _ = write!(
                h,
                "<th scope=\"col\" aria-sort=\"{}\">{}</th>",
                if key == CatalogSort::Name {
                    "ascending"
                } else {
                    "descending"
                },
                Esc(label)
            );
        } else {
            let _ = write!(
                h,
                "<th scope=\"col\"><a href=\"/ui/?q={}&amp;sort={}\">{}</a></th>",
                Q(q),
                Esc(key.as_str()),
                Esc(label)
            );
        }
    }
    h.raw("</tr></thead><tbody>");
    for r in rows {
        let _ = write!(
            h,
            "<tr><td><a href=\"/ui/r/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            Esc(&r.name),
            Esc(&r.name),
            r.tags,
            Esc(&size(r.size)),
            Esc(&r.pushed.map_or("—".to_owned(), |t| age(t, now)))
        );
    }
    table_end(&mut h);
    if let Some(next) = next {
        let _ = write!(
            h,
            "<nav class=\"pages\" aria-label=\"Pages\"><a rel=\"next\" href=\"/ui/?q={}&amp;sort={}&amp;{}\">Next repositories</a></nav>",
            Q(q),
            Esc(sort.as_str()),
            Esc(next)
        );
    }
    h.into_string()
}

/// A repository's tag page: a row of facts per tag, and under it the tag's full digest and
/// the commands that pull it (docker, podman, skopeo, rdctl), each selected whole by a click.
pub(crate) fn repository(
    name: &Name,
    host: &PullHost,
    total: usize,
    cosign: usize,
    rows: &[TagRow],
    more: bool,
    now: u64,
) -> String {
    let mut h = Html::default();
    let _ = write!(
        h,
        "<p class=\"muted\">{total} tag{}{}. Under each tag: its digest and the commands that pull it (a click selects a whole command).</p>",
        if total == 1 { "" } else { "s" },
        match cosign {
            0 => String::new(),
            1 => " (and 1 cosign tag, shown with its image)".to_owned(),
            n => format!(" (and {n} cosign tags, shown with their images)"),
        },
    );
    if rows.is_empty() {
        h.raw("<p>No tags.</p>");
        return h.into_string();
    }
    let heads = [
        "Tag",
        "Digest",
        "Size",
        "Platform",
        "Created",
        "Signed",
        "Referrers",
    ];
    table_start(&mut h, "Tags", &heads);
    for r in rows {
        let _ = write!(
            h,
            "<tr class=\"tag\"><td><a href=\"/ui/r/{}:{}\">{}</a></td><td>",
            Esc(name.as_str()),
            Esc(&r.tag),
            Esc(&r.tag)
        );
        digest_link(&mut h, name.as_str(), &r.digest);
        h.raw("</td>");
        match &r.summary {
            Some(s) => {
                let _ = write!(
                    h,
                    "<td>{}</td><td>{}</td><td>{}</td>",
                    Esc(&size(s.size)),
                    Esc(&if s.platforms.is_empty() {
                        "—".to_owned()
                    } else {
                        s.platforms.join(", ")
                    }),
                    Esc(&s.created.map_or("—".to_owned(), |c| age(c, now)))
                );
            }
            None => {
                h.raw("<td>—</td><td>—</td><td>—</td>");
            }
        }
        h.raw("<td>");
        signed_badge(&mut h, &r.signed);
        h.raw("</td><td>");
        referrer_badges(&mut h, name.as_str(), &r.digest, &r.referrers);
        h.raw("</td></tr>");
        pull_row(&mut h, name, host, r, heads.len());
    }
    table_end(&mut h);
    if more && let Some(last) = rows.last() {
        let _ = write!(
            h,
            "<nav class=\"pages\" aria-label=\"Pages\"><a rel=\"next\" href=\"/ui/r/{}?last={}\">Next tags</a></nav>",
            Esc(name.as_str()),
            Q(&last.tag)
        );
    }
    h.into_string()
}

/// The commands that pull `name:tag` from `host`, labelled: docker, podman, skopeo (into an
/// OCI layout named after the repository's last part) and rdctl. Over plain HTTP the ones
/// that need telling say so (`--tls-verify=false`, `--plain-http`); docker decides that in
/// its daemon's `insecure-registries`.
pub(crate) fn pull_commands(
    name: &Name,
    host: &PullHost,
    tag: &str,
) -> [(&'static str, String); 4] {
    let reference = format!("{}/{}:{tag}", host.host, name.as_str());
    let dir = name.as_str().rsplit('/').next().unwrap_or(name.as_str());
    let (podman, skopeo, rdctl) = if host.plain_http {
        (
            " --tls-verify=false",
            " --src-tls-verify=false",
            " --plain-http",
        )
    } else {
        ("", "", "")
    };
    [
        ("docker", format!("docker pull {reference}")),
        ("podman", format!("podman pull{podman} {reference}")),
        (
            "skopeo",
            format!("skopeo copy{skopeo} docker://{reference} oci:{dir}:{tag}"),
        ),
        ("rdctl", format!("rdctl pull{rdctl} {reference} ./{dir}")),
    ]
}

/// The row under a tag's: its full digest and its pull commands, each selectable whole.
fn pull_row(h: &mut Html, name: &Name, host: &PullHost, r: &TagRow, columns: usize) {
    let _ = write!(
        h,
        "<tr class=\"pull\"><td colspan=\"{columns}\"><ul class=\"pull\" aria-label=\"Pull {}:{}\"><li><span class=\"muted\">digest</span> <code class=\"copy\">{}</code></li>",
        Esc(name.as_str()),
        Esc(&r.tag),
        Esc(r.digest.as_str())
    );
    for (label, command) in pull_commands(name, host, &r.tag) {
        let _ = write!(
            h,
            "<li><span class=\"muted\">{}</span> <code class=\"copy\">{}</code></li>",
            Esc(label),
            Esc(&command)
        );
    }
    h.raw("</ul></td></tr>");
}

/// One badge per kind of referrer (signature, SBOM, attestation, other), saying how many in
/// its title (a signature pushed both as cosign's tag and as a referrer is two manifests),
/// linking to the image's referrers; `—` for none.
fn referrer_badges(h: &mut Html, name: &str, d: &Digest, kinds: &[&str]) {
    let mut shown = false;
    for (kind, label) in [
        ("signature", "signature"),
        ("sbom", "SBOM"),
        ("attestation", "attestation"),
        ("other", "other"),
    ] {
        let n = kinds.iter().filter(|k| **k == kind).count();
        if n == 0 {
            continue;
        }
        let _ = write!(
            h,
            "<a class=\"kind\" title=\"{n} {kind} manifest{}\" href=\"{}#referrers\">{}</a> ",
            if n == 1 { "" } else { "s" },
            image_href(name, d),
            Esc(label)
        );
        shown = true;
    }
    if !shown {
        h.raw("—");
    }
}

/// `verified: signed by sha256:…` (the key's id) when a signature verifies with a configured
/// key, `signature present, not verified` when one exists but none does (or no keys are
/// configured), nothing otherwise.
fn signed_badge(h: &mut Html, s: &Signed) {
    match s {
        Signed::No => {}
        Signed::Unverified => {
            h.raw("<span class=\"muted\">signature present, not verified</span>");
        }
        Signed::By(key) => {
            let _ = write!(
                h,
                "<span class=\"badge\" title=\"verified with a key of [ui] trusted_keys\">verified: signed by <span class=\"mono\">{}</span></span>",
                Esc(key)
            );
        }
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn keys(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// One `<dt>`/`<dd>` pair; `—` for nothing.
fn fact(h: &mut Html, label: &str, value: &str) {
    let _ = write!(
        h,
        "<dt>{}</dt><dd>{}</dd>",
        Esc(label),
        Esc(if value.is_empty() { "—" } else { value })
    );
}

/// A JSON string array as a shell-like line (`["/bin/sh", "-c"]` → `/bin/sh -c`).
fn argv(v: &[String]) -> String {
    v.iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The package name of an FMRI (`pkg://pub/demo/tool@2.1,…` → `demo/tool`).
fn fmri_name(fmri: &str) -> &str {
    let rest = fmri
        .strip_prefix("pkg://")
        .and_then(|r| r.split_once('/').map(|(_, n)| n))
        .or_else(|| fmri.strip_prefix("pkg:/"))
        .unwrap_or(fmri);
    rest.split('@').next().unwrap_or(rest)
}

fn package_link(h: &mut Html, name: &str, text: &str) {
    let _ = write!(
        h,
        "<a href=\"/ui/search?name={}\">{}</a>",
        Q(name),
        Esc(text)
    );
}

/// The image page: facts, config, layers, packages, referrers (or an index's manifests).
pub(crate) fn image(v: &ImageView<'_>) -> String {
    let mut h = Html::default();
    let name = v.name.as_str();
    if v.signed != Signed::No {
        h.raw("<p>");
        signed_badge(&mut h, &v.signed);
        h.raw("</p>");
    }
    h.raw("<dl>");
    let _ = write!(
        h,
        "<dt>Repository</dt><dd><a href=\"/ui/r/{}\">{}</a></dd>",
        Esc(name),
        Esc(name)
    );
    let _ = write!(
        h,
        "<dt>Digest</dt><dd class=\"mono\">{}</dd>",
        Esc(v.digest.as_str())
    );
    // Tags, platform and creation time only when there are some: an artifact (an SBOM, a
    // signature) usually has none of them.
    if !v.tags.is_empty() {
        fact(&mut h, "Tags", &v.tags.join(", "));
    }
    fact(&mut h, "Media type", &v.media_type);
    fact(&mut h, "Size", &size(v.summary.size));
    if !v.summary.platforms.is_empty() {
        fact(&mut h, "Platform", &v.summary.platforms.join(", "));
    }
    if let Some(c) = v.summary.created {
        let created = format!("{} ({})", validator::rfc3339(c), age(c, v.now));
        fact(&mut h, "Created", &created);
    }
    h.raw("</dl>");

    if v.summary.index {
        h.raw("<h2>Manifests</h2>");
        table_start(
            &mut h,
            "Manifests",
            &["Platform", "Digest", "Size", "Created"],
        );
        for c in &v.summary.children {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>",
                Esc(c.platform.as_deref().unwrap_or("—"))
            );
            digest_link(&mut h, name, &c.digest);
            let _ = write!(
                h,
                "</td><td>{}</td><td>{}</td></tr>",
                Esc(&size(c.size)),
                Esc(&c.created.map_or("—".to_owned(), validator::rfc3339))
            );
        }
        table_end(&mut h);
    } else if let Some(a) = &v.artifact {
        artifact(&mut h, name, a);
    } else {
        config(&mut h, v.config);
        layers(&mut h, v);
    }

    if v.artifact.is_some() {
        // An artifact has no packages of its own; its document is above.
    } else {
        packages(&mut h, v);
    }
    referrers(&mut h, v);
    h.into_string()
}

/// An artifact's type, its subject (linked), and its document to read and download.
fn artifact(h: &mut Html, name: &str, a: &super::Artifact) {
    h.raw("<h2>Artifact</h2><dl>");
    fact(h, "Artifact type", &a.artifact_type);
    if let Some(s) = &a.subject {
        // Named as people know it, `repository:tag` (each tag of it), with its digest; an
        // untagged subject as `repository@digest`.
        h.raw("<dt>Subject</dt><dd>");
        for t in &a.subject_tags {
            let _ = write!(
                h,
                "<a href=\"/ui/r/{}:{}\">{}:{}</a>, ",
                Esc(name),
                Esc(t),
                Esc(name),
                Esc(t)
            );
        }
        let _ = write!(
            h,
            "<a class=\"mono\" href=\"{}\">{}@{}</a></dd>",
            image_href(name, s),
            Esc(name),
            Esc(s.as_str())
        );
    }
    h.raw("</dl>");
    let Some(d) = &a.document else {
        h.raw("<p class=\"muted\">No document layer.</p>");
        return;
    };
    h.raw("<h2>Document</h2>");
    let _ = write!(
        h,
        "<p>{} ({}), <a href=\"/v2/{}/blobs/{}\" download=\"{}.json\">download</a></p>",
        Esc(&d.media_type),
        Esc(&size(d.size)),
        Esc(name),
        Esc(d.digest.as_str()),
        Esc(d.digest.encoded())
    );
    match &d.text {
        Some(t) => {
            let _ = write!(
                h,
                "<div class=\"scroll\" role=\"region\" aria-label=\"Document\" tabindex=\"0\"><pre class=\"mono\">{}</pre></div>",
                Esc(t)
            );
        }
        None => {
            h.raw("<p class=\"muted\">Too large, or not text, to show here; download it.</p>");
        }
    }
}

fn packages(h: &mut Html, v: &ImageView<'_>) {
    h.raw("<h2>Packages</h2>");
    if v.packages.is_empty() {
        h.raw("<p class=\"muted\">No SBOM with packages is indexed for this image.</p>");
    } else {
        table_start(h, "Packages", &["Package", "Version", "Publisher", "FMRI"]);
        for p in &v.packages {
            h.raw("<tr><td>");
            package_link(h, &p.name, &p.name);
            let _ = write!(
                h,
                "</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                Esc(p.version.as_deref().unwrap_or("—")),
                Esc(p.publisher.as_deref().unwrap_or("—")),
                Esc(p.fmri.as_deref().unwrap_or("—"))
            );
        }
        table_end(h);
    }
}

fn referrers(h: &mut Html, v: &ImageView<'_>) {
    let name = v.name.as_str();
    h.raw("<h2 id=\"referrers\">Referrers</h2>");
    if v.referrers.is_empty() {
        h.raw(
            "<p class=\"muted\">No signatures, SBOMs or other artifacts refer to this image.</p>",
        );
    } else {
        table_start(
            h,
            "Referrers",
            &["Kind", "Artifact type", "Digest", "Found by"],
        );
        for r in &v.referrers {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"mono\">{}</td><td>",
                Esc(r.kind),
                Esc(if r.artifact_type.is_empty() {
                    "—"
                } else {
                    &r.artifact_type
                })
            );
            digest_link(h, name, &r.digest);
            let _ = write!(h, "</td><td>{}</td></tr>", Esc(r.found_by));
        }
        table_end(h);
    }
}

fn config(h: &mut Html, c: Option<&Value>) {
    h.raw("<h2>Config</h2>");
    let Some(c) = c.and_then(|c| c.get("config")) else {
        h.raw("<p class=\"muted\">No run settings.</p>");
        return;
    };
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let labels: Vec<(String, String)> = c
        .get("Labels")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let stop_timeout = labels
        .iter()
        .find(|(k, _)| k == STOP_TIMEOUT_LABEL)
        .map(|(_, v)| format!("{v} s"))
        .unwrap_or_default();
    h.raw("<dl>");
    fact(h, "Entrypoint", &argv(&strings(c.get("Entrypoint"))));
    fact(h, "Cmd", &argv(&strings(c.get("Cmd"))));
    fact(h, "User", &s("User"));
    fact(h, "Working directory", &s("WorkingDir"));
    fact(h, "Stop signal", &s("StopSignal"));
    fact(h, "Stop timeout", &stop_timeout);
    fact(h, "Volumes", &keys(c.get("Volumes")).join(", "));
    fact(h, "Exposed ports", &keys(c.get("ExposedPorts")).join(", "));
    h.raw("<dt>Environment</dt><dd>");
    let env = strings(c.get("Env"));
    if env.is_empty() {
        h.raw("—");
    } else {
        h.raw("<ul>");
        for e in &env {
            let _ = write!(h, "<li><code>{}</code></li>", Esc(e));
        }
        h.raw("</ul>");
    }
    h.raw("</dd></dl>");
    if !labels.is_empty() {
        h.raw("<h2>Labels</h2>");
        table_start(h, "Labels", &["Label", "Value"]);
        for (k, v) in &labels {
            let _ = write!(
                h,
                "<tr><td class=\"mono\">{}</td><td>{}</td></tr>",
                Esc(k),
                Esc(v)
            );
        }
        table_end(h);
    }
}

fn layers(h: &mut Html, v: &ImageView<'_>) {
    h.raw("<h2>Layers</h2>");
    let layers = v.doc.get("layers").and_then(Value::as_array);
    let Some(layers) = layers.filter(|l| !l.is_empty()) else {
        h.raw("<p class=\"muted\">No layers.</p>");
        return;
    };
    // History entries that made a layer, in layer order (as `rdctl inspect` reads them).
    let history: Vec<Option<&str>> = v
        .config
        .and_then(|c| c.get("history"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|e| {
                    !e.get("empty_layer")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                })
                .map(|e| e.get("created_by").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    table_start(h, "Layers", &["#", "Digest", "Size", "Contents"]);
    for (i, l) in layers.iter().enumerate() {
        let digest = l.get("digest").and_then(Value::as_str).unwrap_or("");
        let short_d = digest
            .split_once(':')
            .map_or(digest, |(_, x)| &x[..x.len().min(12)]);
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"mono\" title=\"{}\">{}</td><td>{}</td><td>",
            i + 1,
            Esc(digest),
            Esc(short_d),
            Esc(&size(l.get("size").and_then(Value::as_u64).unwrap_or(0)))
        );
        let created_by = history.get(i).copied().flatten().unwrap_or("");
        let contents = created_by
            .strip_prefix("rdctl build: ")
            .unwrap_or(created_by);
        let list = contents.strip_prefix("shared: ").unwrap_or(contents);
        let fmris: Vec<&str> = list
            .split_whitespace()
            .filter(|w| w.starts_with("pkg:/"))
            .collect();
        if fmris.is_empty() {
            // The builder's words for a layer that is not one package's.
            h.text(match contents {
                "" => "—",
                "image" => "the whole image: every package below",
                "generated" => "files the build generated (no package owns them)",
                other => other,
            });
        } else {
            h.raw("<ul>");
            for f in fmris {
                h.raw("<li>");
                package_link(h, fmri_name(f), f);
                h.raw("</li>");
            }
            h.raw("</ul>");
        }
        h.raw("</td></tr>");
    }
    table_end(h);
}

/// The search page: the form, then the results or why the query is refused.
pub(crate) fn search(
    name: &str,
    version: &str,
    found: Option<Result<&SearchResult, &str>>,
) -> String {
    let mut h = Html::default();
    h.raw("<form method=\"get\" action=\"/ui/search\" role=\"search\">")
        .raw("<label for=\"name\">Package name or pattern")
        .raw("<input id=\"name\" name=\"name\" type=\"search\" required value=\"");
    h.text(name)
        .raw("\" placeholder=\"openssl, *ssl*, demo/tool\"></label>")
        .raw("<label for=\"version\">Version (optional)")
        .raw("<input id=\"version\" name=\"version\" type=\"text\" value=\"");
    h.text(version)
        .raw("\" placeholder=\"<3.0, >=2.1, =1.2.3\"></label>")
        .raw("<button type=\"submit\">Search</button></form>")
        .raw("<p class=\"muted\">Finds images whose SBOM lists a matching IPS package: <code>*</code> matches any run of characters, <code>?</code> one.</p>");
    match found {
        None => {}
        Some(Err(why)) => {
            let _ = write!(
                h,
                "<p role=\"alert\"><strong>Cannot search:</strong> {}</p>",
                Esc(why)
            );
        }
        Some(Ok(r)) if r.results.is_empty() => {
            h.raw("<p>No image holds a matching package.</p>");
        }
        Some(Ok(r)) => {
            table_start(
                &mut h,
                "Results",
                &["Repository", "Tags", "Image", "Packages"],
            );
            for i in &r.results {
                let _ = write!(
                    h,
                    "<tr><td><a href=\"/ui/r/{}\">{}</a></td><td>{}</td><td>",
                    Esc(&i.repository),
                    Esc(&i.repository),
                    Esc(&i.tags.join(", "))
                );
                digest_link(&mut h, &i.repository, &i.digest);
                h.raw("</td><td><ul>");
                for p in &i.packages {
                    let label = p.fmri.clone().unwrap_or_else(|| {
                        format!("{} {}", p.name, p.version.as_deref().unwrap_or(""))
                    });
                    let _ = write!(h, "<li class=\"mono\">{}</li>", Esc(label.trim()));
                }
                h.raw("</ul></td></tr>");
            }
            table_end(&mut h);
            if let Some(next) = &r.next {
                let _ = write!(
                    h,
                    "<nav class=\"pages\" aria-label=\"Pages\"><a rel=\"next\" href=\"/ui/search?name={}&amp;version={}&amp;last={}\">More results</a></nav>",
                    Q(name),
                    Q(version),
                    Q(next)
                );
            }
        }
    }
    h.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmri_names() {
        assert_eq!(
            fmri_name("pkg://example.org/demo/tool@2.1,5.11"),
            "demo/tool"
        );
        assert_eq!(fmri_name("pkg:/demo/tool@2.1"), "demo/tool");
        assert_eq!(fmri_name("demo/tool"), "demo/tool");
    }

    #[test]
    fn values_are_escaped() {
        let row = RepoRow {
            name: "a/<b>".to_owned(),
            tags: 1,
            size: 10,
            pushed: None,
        };
        let body = catalog("<script>", CatalogSort::Size, &[row], Some("start=100"), 0);
        assert!(!body.contains("<script>"), "{body}");
        assert!(!body.contains("<b>"), "{body}");
        assert!(body.contains("q=%3Cscript%3E"), "{body}");
    }
}
