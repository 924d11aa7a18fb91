//! The one glob matcher of the toolchain: repository, tag, host, image-name and package-name
//! patterns in `registry.toml`, `sync` rules, credential providers, admission policies and the
//! registry's package search all match through [`Glob`].
//!
//! Matching runs a set of pattern positions over the text once (a Thompson simulation), so it
//! takes at most `pattern × text` steps whatever the pattern. The recursive matchers it replaced
//! tried every split of the text at every `*`: a package search for `*a*a*a*a*a*a*a*a*a*a*b`
//! took 53 s against one 40-character name. Search patterns come from anyone who can reach the
//! registry, so the cost of a match must not depend on how many stars they hold.
//!
//! The callers' dialects differ in what `/` (or `.`), `?` and `**` mean; [`GlobSyntax`] names
//! each of them, so every caller keeps the meaning its documentation gives.

/// What `**` means in a [`GlobSyntax`] with a separator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoubleStar {
    /// No meaning of its own: `**` is two `*`.
    Plain,
    /// Any run of bytes, separators included (`team/**` matches `team/a/b`, not `team`).
    Crosses,
    /// As [`DoubleStar::Crosses`]; and `**/` may also match nothing (`**/x` matches `x`,
    /// `a/**/b` matches `a/b`), as in `sync` rules.
    CrossesOrNothingBeforeSeparator,
    /// A whole segment `**` matches zero or more whole segments (`a/**` matches `a` and
    /// `a/b/c`, `a/**/b` matches `a/b`); inside a segment (`a**b`) it is two `*`. As in
    /// admission policies.
    WholeSegments,
}

/// A glob dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobSyntax {
    /// With a separator, `*` and `?` never match it; without, they match any byte.
    pub separator: Option<u8>,
    /// Whether `?` matches one byte (otherwise it is itself).
    pub question: bool,
    /// What `**` means (only with a separator).
    pub double_star: DoubleStar,
}

impl GlobSyntax {
    /// `*` any run of bytes, `?` one byte: shell-style matching of whole strings.
    pub const ANY: GlobSyntax = GlobSyntax {
        separator: None,
        question: true,
        double_star: DoubleStar::Plain,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// This byte.
    Lit(u8),
    /// One byte that is not the separator.
    One,
    /// Any run of bytes (none included); `cross`: separators too.
    Run { cross: bool },
    /// Matches nothing and lets the match go on either at the next token or at `to`.
    Skip { to: usize },
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    toks: Vec<Tok>,
    separator: Option<u8>,
}

impl Glob {
    /// Compiles `pattern` in `syntax`. Every pattern compiles: characters without a meaning
    /// match themselves.
    pub fn new(pattern: &str, syntax: GlobSyntax) -> Glob {
        let p = pattern.as_bytes();
        let sep = syntax.separator;
        let mut toks = Vec::with_capacity(p.len() + 2);
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                b'*' => {
                    let stars = p[i..].iter().take_while(|&&c| c == b'*').count();
                    let end = i + stars;
                    let after = p.get(end).copied();
                    let double = stars == 2 && sep.is_some();
                    match syntax.double_star {
                        DoubleStar::Crosses | DoubleStar::CrossesOrNothingBeforeSeparator
                            if stars >= 2 && sep.is_some() =>
                        {
                            if syntax.double_star == DoubleStar::CrossesOrNothingBeforeSeparator
                                && double
                                && let Some(s) = after.filter(|&a| Some(a) == sep)
                            {
                                // `**/`: (any run, then the separator) or nothing.
                                optional(&mut toks, [Tok::Run { cross: true }, Tok::Lit(s)]);
                                i = end + 1;
                                continue;
                            }
                            toks.push(Tok::Run { cross: true });
                        }
                        DoubleStar::WholeSegments if double => {
                            let starts = i == 0 || Some(p[i - 1]) == sep;
                            let ends = after.is_none() || after == sep;
                            if starts && ends {
                                if let Some(s) = after {
                                    // `**/` (start or middle): zero or more segments and their
                                    // separators.
                                    optional(&mut toks, [Tok::Run { cross: true }, Tok::Lit(s)]);
                                    i = end + 1;
                                    continue;
                                }
                                // The whole pattern (`/**` at the end is taken with its
                                // separator, below).
                                toks.push(Tok::Run { cross: true });
                            } else {
                                toks.push(Tok::Run { cross: false });
                            }
                        }
                        _ => toks.push(Tok::Run {
                            cross: sep.is_none(),
                        }),
                    }
                    i = end;
                    continue;
                }
                b'?' if syntax.question => toks.push(Tok::One),
                c if syntax.double_star == DoubleStar::WholeSegments
                    && Some(c) == sep
                    && &p[i + 1..] == b"**" =>
                {
                    // `/**` at the end: the separator and any run after it, or nothing.
                    optional(&mut toks, [Tok::Lit(c), Tok::Run { cross: true }]);
                    break;
                }
                c => toks.push(Tok::Lit(c)),
            }
            i += 1;
        }
        Glob {
            toks,
            separator: sep,
        }
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        self.matches_bytes(text.as_bytes())
    }

    /// Whether the whole of `text` matches.
    pub fn matches_bytes(&self, text: &[u8]) -> bool {
        self.run(text).0
    }

    /// The match, and how many (position, byte) steps it took: at most one per token per
    /// byte of text.
    fn run(&self, text: &[u8]) -> (bool, usize) {
        let mut steps = 0;
        let n = self.toks.len();
        let mut now = vec![false; n + 1];
        let mut next = vec![false; n + 1];
        now[0] = true;
        self.close(&mut now);
        for &c in text {
            next.iter_mut().for_each(|s| *s = false);
            let mut any = false;
            for (i, tok) in self.toks.iter().enumerate() {
                if !now[i] {
                    continue;
                }
                steps += 1;
                let free = Some(c) != self.separator;
                match *tok {
                    Tok::Lit(l) if l == c => next[i + 1] = true,
                    Tok::One if free => next[i + 1] = true,
                    Tok::Run { cross } if cross || free => next[i] = true,
                    _ => continue,
                }
                any = true;
            }
            if !any {
                return (false, steps);
            }
            self.close(&mut next);
            std::mem::swap(&mut now, &mut next);
        }
        (now[n], steps)
    }

    /// Adds the positions reachable without consuming a byte. Every such step goes forward,
    /// so one sweep in order reaches them all.
    fn close(&self, set: &mut [bool]) {
        for i in 0..self.toks.len() {
            if !set[i] {
                continue;
            }
            match self.toks[i] {
                Tok::Run { .. } => set[i + 1] = true,
                Tok::Skip { to } => {
                    set[i + 1] = true;
                    set[to] = true;
                }
                Tok::Lit(_) | Tok::One => {}
            }
        }
    }
}

/// Pushes `group` as an optional part of the pattern: a skip past it, then its tokens.
fn optional(toks: &mut Vec<Tok>, group: [Tok; 2]) {
    toks.push(Tok::Skip {
        to: toks.len() + 1 + group.len(),
    });
    toks.extend(group);
}

/// Compiles and matches once: `Glob::new(pattern, syntax).matches(text)`.
pub fn glob_matches(pattern: &str, text: &str, syntax: GlobSyntax) -> bool {
    Glob::new(pattern, syntax).matches(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLASH: Option<u8> = Some(b'/');

    fn syntax(double_star: DoubleStar, question: bool) -> GlobSyntax {
        GlobSyntax {
            separator: SLASH,
            question,
            double_star,
        }
    }

    #[test]
    fn any_run_and_one_byte() {
        let m = |p, t| glob_matches(p, t, GlobSyntax::ANY);
        assert!(m("*ssl*", "library/openssl"));
        assert!(m("open?sl", "openssl"));
        assert!(!m("open?sl", "opensl"));
        assert!(m("*", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("a*b*c", "aXbYc"));
        assert!(!m("a*b*c", "aXbY"));
        assert!(m("**", "a/b"));
    }

    #[test]
    fn star_keeps_to_its_segment_with_a_separator() {
        let s = syntax(DoubleStar::Plain, true);
        assert!(glob_matches("team/*", "team/app", s));
        assert!(!glob_matches("team/*", "team/a/b", s));
        assert!(!glob_matches("team/?", "team/", s));
        assert!(!glob_matches("a?b", "a/b", s));
        assert!(glob_matches("team/**", "team/app", s));
        assert!(!glob_matches("team/**", "team/a/b", s));
        let dots = GlobSyntax {
            separator: Some(b'.'),
            question: false,
            double_star: DoubleStar::Plain,
        };
        assert!(glob_matches("*.example.com", "r.example.com", dots));
        assert!(!glob_matches("*.example.com", "a.r.example.com", dots));
        assert!(!glob_matches("r?.example.com", "r1.example.com", dots));
    }

    #[test]
    fn double_star_crosses() {
        let s = syntax(DoubleStar::Crosses, false);
        assert!(glob_matches("team/**", "team/a/b", s));
        assert!(!glob_matches("team/**", "team", s));
        assert!(!glob_matches("**/x", "x", s));
        assert!(glob_matches("**/x", "a/b/x", s));
        assert!(glob_matches("a/**/b", "a/c/d/b", s));
        assert!(!glob_matches("a/**/b", "a/b", s));
        assert!(glob_matches("***", "a/b", s));
    }

    #[test]
    fn double_star_slash_may_match_nothing() {
        let s = syntax(DoubleStar::CrossesOrNothingBeforeSeparator, true);
        assert!(glob_matches("**/x", "x", s));
        assert!(glob_matches("**/x", "a/b/x", s));
        assert!(!glob_matches("**/x", "ax", s));
        assert!(glob_matches("a/**/b", "a/b", s));
        assert!(glob_matches("a/**/b", "a/c/d/b", s));
        assert!(glob_matches("apps/**", "apps/x/y", s));
        assert!(!glob_matches("apps/**", "apps", s));
        assert!(glob_matches("a**b", "a/x/b", s));
    }

    #[test]
    fn double_star_whole_segments() {
        let s = syntax(DoubleStar::WholeSegments, false);
        assert!(glob_matches("r/prod/**", "r/prod", s));
        assert!(glob_matches("r/prod/**", "r/prod/team/app", s));
        assert!(!glob_matches("r/prod/**", "r/production", s));
        assert!(!glob_matches("r/prod/**", "r/dev/app", s));
        assert!(glob_matches("**", "anything/at/all", s));
        assert!(glob_matches("**/app", "app", s));
        assert!(glob_matches("**/app", "r/a/b/app", s));
        assert!(!glob_matches("**/app", "r/a/bapp", s));
        assert!(glob_matches("a/**/b", "a/b", s));
        assert!(glob_matches("a/**/b", "a/x/y/b", s));
        // Inside a segment `**` is two stars.
        assert!(glob_matches("a**b", "axb", s));
        assert!(!glob_matches("a**b", "a/b", s));
    }

    #[test]
    fn many_stars_cost_at_most_pattern_times_text_steps() {
        // The recursive matchers this replaced took 53 s (debug build) for ten stars against
        // 40 bytes; here 200 stars against 4,000 bytes.
        let text = "a".repeat(4000);
        for s in [
            GlobSyntax::ANY,
            syntax(DoubleStar::Crosses, false),
            syntax(DoubleStar::CrossesOrNothingBeforeSeparator, true),
            syntax(DoubleStar::WholeSegments, false),
        ] {
            for (pattern, want) in [
                (format!("{}b", "*a".repeat(200)), false),
                (format!("{}a", "*a".repeat(200)), true),
            ] {
                let g = Glob::new(&pattern, s);
                let (matched, steps) = g.run(text.as_bytes());
                assert_eq!(matched, want, "{s:?}");
                assert!(steps <= g.toks.len() * text.len(), "{steps} steps, {s:?}");
            }
        }
    }
}
