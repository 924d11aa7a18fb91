//! The operator docs against the code: every configuration key documented in
//! docs/operations.md and docs/image-file.md is one the code accepts, and every key the code
//! accepts is documented.
//!
//! The code's keys come from the loaders themselves: every config struct refuses unknown
//! fields, and serde's refusal lists the struct's field names ("unknown field `x`, expected one
//! of `a`, `b`"). Probing each key with a table value (or an array of tables) finds the nested
//! structs, so a key added
//! to any config struct shows up here without a list to keep in step.

use std::collections::BTreeSet;
use std::path::Path;

use crate::util::root;

const PROBE: &str = "zzz_not_a_key";

/// The field names serde lists after refusing the probe key, or None when the message is not
/// such a refusal (the value is not a struct).
fn expected_fields(message: &str) -> Option<Vec<String>> {
    let at = message
        .find(&format!("unknown key `{PROBE}`"))
        .or_else(|| message.find(&format!("unknown field `{PROBE}`")))?;
    let rest = &message[at..];
    let rest = &rest[..rest.find('\n').unwrap_or(rest.len())];
    // Backquoted names: the probe, then the expected ones.
    let names: Vec<String> = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .skip(1)
        .map(str::to_owned)
        .collect();
    Some(names)
}

/// All keys of a TOML config (nested structs as `parent.child`, parents included), found by
/// loading probe documents with `load`, which returns the error text.
fn toml_keys(load: &dyn Fn(&str) -> Option<String>) -> BTreeSet<String> {
    fn walk(
        load: &dyn Fn(&str) -> Option<String>,
        path: &[String],
        out: &mut BTreeSet<String>,
    ) -> bool {
        let probe = |header: &str| {
            let doc = if path.is_empty() {
                format!("{PROBE} = 1\n")
            } else {
                format!("{header}\n{PROBE} = 1\n")
            };
            load(&doc).as_deref().and_then(expected_fields)
        };
        // A table (`[a.b]`), or else an array of tables (`[[a.b]]`, keys listed as `a.b.key`).
        let Some(fields) = probe(&format!("[{}]", path.join(".")))
            .or_else(|| probe(&format!("[[{}]]", path.join("."))))
        else {
            return false;
        };
        for f in fields {
            let mut p = path.to_vec();
            p.push(f);
            out.insert(p.join("."));
            walk(load, &p, out);
        }
        true
    }
    let mut out = BTreeSet::new();
    assert!(
        walk(load, &[], &mut out),
        "the loader did not refuse an unknown key"
    );
    out
}

/// Keys in the first column (backquoted) of the Markdown tables between the heading line
/// `from` and the next heading of the same or a higher level.
fn documented(doc: &str, from: &str) -> BTreeSet<String> {
    let level = from.chars().take_while(|&c| c == '#').count();
    let mut lines = doc.lines().skip_while(|l| *l != from);
    assert!(lines.next().is_some(), "heading {from:?} not found");
    let mut out = BTreeSet::new();
    // A `#` comment in a fenced TOML example is not a heading.
    let mut fenced = false;
    for l in lines {
        if l.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = l.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && hashes <= level {
            break;
        }
        if let Some(cell) = l.strip_prefix("| `")
            && let Some(end) = cell.find('`')
        {
            out.insert(cell[..end].to_owned());
        }
    }
    assert!(!out.is_empty(), "no documented keys under {from:?}");
    out
}

/// Adds the parents of dotted keys (`provisioner` for `provisioner.kind`, `packages` for
/// `packages[].fmri`).
fn with_parents(keys: BTreeSet<String>) -> BTreeSet<String> {
    let mut out = keys.clone();
    for k in &keys {
        let mut k = k.as_str();
        while let Some((parent, _)) = k.rsplit_once('.') {
            k = parent.trim_end_matches("[]");
            out.insert(k.to_owned());
        }
    }
    out
}

fn assert_same(what: &str, documented: BTreeSet<String>, code: BTreeSet<String>) {
    let documented = with_parents(documented);
    let missing: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{what}: keys the code accepts but the docs do not list: {missing:?}; \
         keys the docs list but the code refuses: {unknown:?}. Fix the table (one row per key; \
         a nested registry table may instead be covered by its own docs/NAME.md that shows \
         `[table]` and names or assigns each key)"
    );
}

fn read_doc(name: &str) -> String {
    std::fs::read_to_string(root().join("docs").join(name))
        .unwrap_or_else(|e| panic!("docs/{name}: {e}"))
}

/// Writes `text` to `name` in `dir` and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn registry_toml_keys_match_operations_md() {
    let dir = tempfile::tempdir().unwrap();
    let code = toml_keys(&|doc| {
        let p = write(dir.path(), "registry.toml", doc);
        registry::ServeConfig::load_with_env(Some(&p), &|_| None)
            .err()
            .map(|e| validator::error_chain(&e))
    });
    let doc = read_doc("operations.md");
    let mut listed = documented(&doc, "### `registry.toml`");
    listed.extend(delegated(&doc, &listed, &code));
    assert_same("docs/operations.md registry.toml", listed, code);
    let proxy = array_table_keys(
        &|doc| {
            let p = write(dir.path(), "registry.toml", doc);
            registry::ServeConfig::load_with_env(Some(&p), &|_| None)
                .err()
                .map(|e| validator::error_chain(&e))
        },
        "proxy",
    );
    assert_same(
        "docs/operations.md [[proxy]]",
        documented(&doc, "### Pull-through cache (`[[proxy]]`)"),
        proxy,
    );
    let sync = array_table_keys(
        &|doc| {
            let p = write(dir.path(), "registry.toml", doc);
            registry::ServeConfig::load_with_env(Some(&p), &|_| None)
                .err()
                .map(|e| validator::error_chain(&e))
        },
        "sync",
    );
    assert_same(
        "docs/operations.md [[sync]]",
        documented(&doc, "### Scheduled sync (`[[sync]]`)"),
        sync,
    );
}

/// Keys of nested tables (`auth`, `tls.cert`, ...) that another document under docs/ covers:
/// the table counts as documented where a document shows its header (`[auth]`, also inside
/// backquotes or a TOML example), and a key of it where that document names the key in
/// backquotes (`cert` or `tls.cert`) or assigns it in a TOML example (`cert = ...`, also
/// commented out). Tables with their own document need no copy of every key here.
fn delegated(_doc: &str, listed: &BTreeSet<String>, code: &BTreeSet<String>) -> BTreeSet<String> {
    let docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let assigns = |text: &str, key: &str| {
        text.lines().any(|l| {
            let l = l.trim_start().trim_start_matches('#').trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
    };
    let mut out = BTreeSet::new();
    for key in code.difference(listed) {
        let table = key.split('.').next().unwrap_or(key);
        let header = format!("[{table}");
        for text in docs.iter().filter(|t| t.contains(&header)) {
            let child = key.rsplit('.').next().unwrap_or(key);
            if key == table
                || text.contains(&format!("`{child}`"))
                || text.contains(&format!("`{key}`"))
                || text.contains(&format!("[{key}]"))
                || assigns(text, child)
            {
                out.insert(key.clone());
                break;
            }
        }
    }
    out
}

#[test]
fn registry_environment_variables_in_operations_md_are_read() {
    let doc = read_doc("operations.md");
    let vars: BTreeSet<&str> = doc
        .split('`')
        .filter(|w| {
            w.starts_with("RDCTL_REGISTRY_")
                && w.bytes()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
        })
        .collect();
    assert!(vars.len() >= 9, "{vars:?}");
    let default = format!(
        "{:?}",
        registry::ServeConfig::load_with_env(None, &|_| None).unwrap()
    );
    for var in vars {
        // Each variable, set alone, either changes the configuration or is refused by name.
        let got = registry::ServeConfig::load_with_env(None, &|k| {
            (k == var).then(|| "/zzz-marker".to_owned())
        });
        match got {
            Ok(c) => assert_ne!(format!("{c:?}"), default, "{var} is not read"),
            Err(e) => assert!(
                validator::error_chain(&e).contains(var),
                "{var}: {}",
                validator::error_chain(&e)
            ),
        }
    }
}

#[test]
fn worker_toml_and_zone_keys_match_operations_md() {
    let dir = tempfile::tempdir().unwrap();
    let worker = toml_keys(&|doc| {
        let p = write(dir.path(), "worker.toml", doc);
        worker_runtime::WorkerConfig::load(&p)
            .err()
            .map(|e| validator::error_chain(&e))
    });
    let zone = toml_keys(&|doc| {
        let p = write(dir.path(), "zone.toml", doc);
        worker_runtime::load_zone(&p)
            .err()
            .map(|e| validator::error_chain(&e))
    });
    let mirror_keys = array_table_keys(
        &|doc| {
            let p = write(
                dir.path(),
                "worker.toml",
                &format!(
                    "zones_dir = \"z\"\nstate_dir = \"s\"\n[provisioner]\nkind = \"dir\"\nbase = \"b\"\n{doc}"
                ),
            );
            worker_runtime::WorkerConfig::load(&p)
                .err()
                .map(|e| validator::error_chain(&e))
        },
        "mirrors",
    );
    let doc = read_doc("operations.md");
    assert_same(
        "docs/operations.md [[mirrors]]",
        documented(&doc, "### Registry mirrors (`[[mirrors]]`)"),
        mirror_keys,
    );
    // The [[mirrors]] keys have their own table, checked above.
    let worker: BTreeSet<String> = worker
        .into_iter()
        .filter(|k| !k.starts_with("mirrors."))
        .collect();
    assert_same(
        "docs/operations.md worker.toml",
        documented(&doc, "### `worker.toml`"),
        worker,
    );
    assert_same(
        "docs/operations.md zone manifests",
        documented(&doc, "### Zone manifests (`<zones_dir>/<name>.toml`)"),
        zone,
    );
}

/// The keys of the `[[name]]` tables a loader accepts, found by probing one such table.
fn array_table_keys(load: &dyn Fn(&str) -> Option<String>, name: &str) -> BTreeSet<String> {
    let fields = load(&format!("[[{name}]]\n{PROBE} = 1\n"))
        .as_deref()
        .and_then(expected_fields)
        .unwrap_or_else(|| panic!("the loader did not refuse an unknown key in [[{name}]]"));
    fields.into_iter().collect()
}

#[test]
fn sync_file_keys_match_operations_md() {
    let load = |doc: &str| {
        config_toml::from_str::<registry_client::sync::SyncFile>(doc, &[])
            .err()
            .map(|e| e.to_string())
    };
    let mut keys = toml_keys(&load);
    keys.extend(
        array_table_keys(&load, "sync")
            .into_iter()
            .map(|k| format!("sync.{k}")),
    );
    let doc = read_doc("operations.md");
    assert_same(
        "docs/operations.md sync file",
        documented(&doc, "### Sync file (`rdctl sync --config FILE`)"),
        keys,
    );
}

#[test]
fn image_file_and_lockfile_keys_match_image_file_md() {
    let dir = tempfile::tempdir().unwrap();
    let image_keys = toml_keys(&|doc| {
        let p = dir.path().join("image.toml");
        builder::ImageFile::parse(&p, doc.as_bytes().to_vec())
            .err()
            .map(|e| validator::error_chain(&e))
    });
    let doc = read_doc("image-file.md");
    let split = doc
        .find("## The lockfile")
        .expect("image-file.md has a lockfile section");
    let (image_doc, lock_doc) = doc.split_at(split);
    // Every table row before the lockfile section documents an image file key.
    let image_documented: BTreeSet<String> = image_doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|cell| cell.split_once('`').map(|(k, _)| k.to_owned()))
        .collect();
    assert_same(
        "docs/image-file.md image file",
        image_documented,
        image_keys,
    );

    // The lockfile: JSON, read through Lockfile::load_for with a valid image file beside it.
    let image = write(
        dir.path(),
        "image.toml",
        "[publishers]\n\"example.org\" = \"repo\"\n[packages]\ninclude = [\"demo/hello\"]\n",
    );
    let image = builder::ImageFile::load(&image).unwrap();
    let load = |json: String| {
        std::fs::write(image.lockfile_path(), json).unwrap();
        builder::Lockfile::load_for(&image)
            .err()
            .map(|e| validator::error_chain(&e))
            .unwrap_or_default()
    };
    let probe = format!("{{\"{PROBE}\": 1}}");
    let mut lock_keys = BTreeSet::new();
    for top in expected_fields(&load(probe.clone())).expect("the lockfile refuses unknown keys") {
        lock_keys.insert(top.clone());
        if let Some(inner) = expected_fields(&load(format!("{{\"{top}\": [{probe}]}}"))) {
            lock_keys.extend(inner.into_iter().map(|k| format!("{top}[].{k}")));
        }
    }
    assert!(lock_keys.contains("packages[].fmri"), "{lock_keys:?}");
    assert_same(
        "docs/image-file.md lockfile",
        documented(lock_doc, "## The lockfile (`<image file stem>.lock.json`)"),
        lock_keys,
    );
}

#[test]
fn metrics_in_operations_md_are_the_ones_served() {
    use std::io::{Read as _, Write as _};
    let data = crate::util::tempdir();
    let server = crate::util::Server::start(data.path(), &[]);
    // A request first, so the per-request series exist.
    let get = |path: &str| {
        let mut c = std::net::TcpStream::connect(server.addr).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        body
    };
    assert!(get("/v2/").starts_with("HTTP/1.1 200"));
    let text = get("/metrics");
    let served: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(!served.is_empty(), "{text}");
    let doc = read_doc("operations.md");
    let documented: BTreeSet<String> = documented(&doc, "## Metrics")
        .into_iter()
        .filter(|k| k.starts_with("registry_"))
        .collect();
    let missing: Vec<_> = served.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&served).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "served but not in docs/operations.md: {missing:?}; documented but not served: {unknown:?}"
    );
    drop(server);
}

#[test]
fn example_lockfile_is_what_rdctl_lock_writes() {
    let dir = crate::util::tempdir();
    let d = dir.path();
    let example = root().join("examples/hello");
    for m in ["system-base.p5m", "hello.p5m"] {
        crate::util::ok(
            crate::util::rdctl()
                .args(["ips", "publish", "--repo"])
                .arg(d.join("repo"))
                .args(["--publisher", "example.org", "--proto"])
                .arg(example.join("proto"))
                .arg(example.join("manifests").join(m)),
        );
    }
    std::fs::copy(example.join("image.toml"), d.join("image.toml")).unwrap();
    crate::util::ok(crate::util::rdctl().arg("lock").arg(d.join("image.toml")));
    let made = std::fs::read_to_string(d.join("image.lock.json")).unwrap();
    let committed = std::fs::read_to_string(example.join("image.lock.json")).unwrap();
    assert_eq!(
        made, committed,
        "examples/hello/image.lock.json is stale: publish examples/hello/manifests and run \
         rdctl lock examples/hello/image.toml (examples/hello/README.md)"
    );
}
