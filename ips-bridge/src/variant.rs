//! Variants and facets: which actions of a manifest apply to an image (pkg's `_varcet`).

use std::collections::BTreeMap;

use crate::action::Action;

/// An image's variants and facets, and the filter they imply.
///
/// Variants are exact values (`variant.arch=i386`). Facets map names or glob patterns
/// (`facet.locale.*`) to true or false.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFilter {
    variants: BTreeMap<String, String>,
    facets: BTreeMap<String, bool>,
}

impl ImageFilter {
    /// An image with no variants and only default facets.
    pub fn new() -> Self {
        Self::default()
    }

    /// The usual illumos zone image: `variant.arch=<arch>`,
    /// `variant.opensolaris.zone=nonglobal`.
    pub fn zone(arch: &str) -> Self {
        Self::new()
            .variant("variant.arch", arch)
            .variant("variant.opensolaris.zone", "nonglobal")
    }

    /// Sets a variant (the `variant.` prefix is added when missing).
    pub fn variant(mut self, name: &str, value: &str) -> Self {
        self.variants
            .insert(prefixed("variant.", name), value.to_owned());
        self
    }

    /// Sets a facet or facet pattern (the `facet.` prefix is added when missing).
    pub fn facet(mut self, name: &str, value: bool) -> Self {
        self.facets.insert(prefixed("facet.", name), value);
        self
    }

    /// The variants set on the image.
    pub fn variants(&self) -> &BTreeMap<String, String> {
        &self.variants
    }

    /// The facets set on the image (names and patterns).
    pub fn facets(&self) -> &BTreeMap<String, bool> {
        &self.facets
    }

    /// The image's value for a facet as pkg computes it: an exact entry, else the longest
    /// matching pattern, else `false` for `facet.debug.*` and `facet.optional.*` and `true`
    /// for everything else.
    pub fn facet_value(&self, name: &str) -> bool {
        if let Some(v) = self.facets.get(name) {
            return *v;
        }
        let mut best: Option<(&str, bool)> = None;
        for (pat, v) in &self.facets {
            if glob(pat, name) && best.is_none_or(|(b, _)| pat.len() > b.len()) {
                best = Some((pat, *v));
            }
        }
        match best {
            Some((_, v)) => v,
            None => !(name.starts_with("facet.debug.") || name.starts_with("facet.optional.")),
        }
    }

    /// True when a package may be installed in this image: for every `variant.*` the
    /// package declares (`set name=variant.arch value=i386 value=sparc`), the image's value
    /// must be among the declared ones. Variants the image does not set are not checked.
    pub fn package_installable(&self, manifest: &crate::Manifest) -> bool {
        manifest
            .by_kind(crate::ActionKind::Set)
            .filter_map(|a| Some((a.get("name")?, a.get_all("value"))))
            .filter(|(name, _)| name.starts_with("variant."))
            .all(|(name, values)| match self.variants.get(name) {
                Some(img) => values.iter().any(|v| v == img),
                None => true,
            })
    }

    /// True when `action` applies to this image, by pkg's `_varcet` rules.
    ///
    /// Variants: a repeated (list-valued) variant tag excludes the action; every
    /// `variant.X=V` tag must equal the image's value; when the image has no value for X the
    /// action is kept, except for `variant.debug.*` tags whose value does not start with
    /// `false`. Facets: a repeated facet tag excludes the action; every facet tagged `all`
    /// must be true; of the facets tagged with any other value, at least one must be true.
    pub fn allows(&self, action: &Action) -> bool {
        // None: no "any" facet seen yet; then whether one of them was true.
        let mut any: Option<bool> = None;
        for (k, vals) in action.attrs() {
            if k.starts_with("variant.") {
                let [v] = vals.as_slice() else {
                    return false;
                };
                let ok = match self.variants.get(k) {
                    Some(img) => img == v,
                    None => !k.starts_with("variant.debug.") || v.starts_with("false"),
                };
                if !ok {
                    return false;
                }
            } else if k.starts_with("facet.") {
                let [v] = vals.as_slice() else {
                    return false;
                };
                let on = self.facet_value(k);
                if v == "all" {
                    if !on {
                        return false;
                    }
                } else if on {
                    any = Some(true);
                } else if any.is_none() {
                    any = Some(false);
                }
            }
        }
        any != Some(false)
    }
}

fn prefixed(prefix: &str, name: &str) -> String {
    if name.starts_with(prefix) {
        name.to_owned()
    } else {
        format!("{prefix}{name}")
    }
}

/// Shell-style matching with `*` and `?` (pkg uses `fnmatch` for facet patterns).
fn glob(pat: &str, s: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Action {
        Action::parse(s).unwrap()
    }

    #[test]
    fn variants_must_match_and_unset_means_false() {
        let img = ImageFilter::zone("i386");
        assert!(img.allows(&a("dir path=x variant.arch=i386")));
        assert!(!img.allows(&a("dir path=x variant.arch=sparc")));
        assert!(!img.allows(&a("dir path=x variant.opensolaris.zone=global")));
        assert!(img.allows(&a("dir path=x variant.opensolaris.zone=nonglobal")));
        assert!(img.allows(&a("dir path=x variant.debug.osnet=false")));
        assert!(!img.allows(&a("dir path=x variant.debug.osnet=true")));
        assert!(!img.allows(&a("dir path=x variant.arch=i386 variant.arch=sparc")));
        assert!(img.allows(&a("dir path=x")));
        // A variant the image does not set is no reason to drop an action (pkg keeps it),
        // unless it is a debug variant not starting with "false".
        assert!(img.allows(&a("dir path=x variant.opensolaris.imagetype=partial")));
        assert!(img.allows(&a("dir path=x variant.debug.osnet=falsey")));
        let sparse = ImageFilter::zone("i386").variant("opensolaris.imagetype", "full");
        assert!(!sparse.allows(&a("dir path=x variant.opensolaris.imagetype=partial")));
    }

    #[test]
    fn facets_defaults_patterns_all_and_any() {
        let img = ImageFilter::new()
            .facet("locale.*", false)
            .facet("locale.de", true)
            .facet("doc.man", false);
        assert!(img.facet_value("facet.devel"));
        assert!(!img.facet_value("facet.debug.x"));
        assert!(!img.facet_value("facet.optional.x"));
        assert!(!img.facet_value("facet.locale.fr"));
        assert!(img.facet_value("facet.locale.de"));
        assert!(img.allows(&a("file h path=x facet.devel=true")));
        assert!(!img.allows(&a("file h path=x facet.doc.man=true")));
        // Any one true-tagged facet is enough.
        assert!(img.allows(&a("file h path=x facet.doc.man=true facet.devel=true")));
        // Every all-tagged facet must be true.
        assert!(!img.allows(&a("file h path=x facet.doc.man=all facet.devel=all")));
        assert!(img.allows(&a("file h path=x facet.locale.de=all facet.devel=all")));
        assert!(!img.allows(&a("file h path=x facet.locale.fr=true")));
        // Any value other than "all" counts like "true".
        assert!(!img.allows(&a("file h path=x facet.doc.man=false")));
        assert!(img.allows(&a("file h path=x facet.devel=false")));
        // Repeated facet tags exclude the action.
        assert!(!img.allows(&a("file h path=x facet.devel=true facet.devel=all")));
        // Longest pattern wins.
        let img = ImageFilter::new()
            .facet("*", false)
            .facet("facet.doc.*", true);
        assert!(img.facet_value("facet.doc.html"));
        assert!(!img.facet_value("facet.devel"));
    }

    #[test]
    fn packages_must_declare_the_image_arch() {
        let img = ImageFilter::zone("i386");
        let m = |t: &str| crate::Manifest::parse(t).unwrap();
        assert!(img.package_installable(&m("set name=variant.arch value=sparc value=i386\n")));
        assert!(!img.package_installable(&m("set name=variant.arch value=sparc\n")));
        assert!(!img.package_installable(&m("set name=variant.opensolaris.zone value=global\n")));
        assert!(img.package_installable(&m("set name=pkg.summary value=x\n")));
        assert!(img.package_installable(&m("set name=variant.debug.osnet value=true\n")));
    }

    #[test]
    fn glob_matches_like_fnmatch() {
        assert!(glob("facet.locale.*", "facet.locale.de_DE"));
        assert!(glob("a?c", "abc"));
        assert!(glob("*x*y", "axbxy"));
        assert!(!glob("a*b", "acbd"));
        assert!(glob("*", ""));
    }
}
