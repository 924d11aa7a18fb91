//! `WWW-Authenticate` challenges (RFC 9110 §11.6.1, the Docker token protocol's `Bearer`).
//!
//! The header comes from the network, so the parser is strict and bounded: at most
//! [`MAX_HEADER_BYTES`] of input, [`MAX_CHALLENGES`] challenges and [`MAX_PARAMS`] parameters each;
//! anything malformed is an error rather than a guess. It never panics (fuzzed by
//! `registry-client/fuzz/fuzz_targets/www_authenticate.rs`).
//!
//! Grammar (RFC 9110): `challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]`,
//! `auth-param = token BWS "=" BWS ( token / quoted-string )`, challenges and parameters both
//! separated by commas, so a token after a comma starts a new challenge unless an `=` follows it.

use std::fmt;

use reqwest::Url;

/// Longest header accepted.
pub const MAX_HEADER_BYTES: usize = 8 << 10;
/// Most challenges accepted in one header.
pub const MAX_CHALLENGES: usize = 16;
/// Most parameters accepted in one challenge.
pub const MAX_PARAMS: usize = 32;

/// Why a `WWW-Authenticate` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad WWW-Authenticate header at byte {offset}: {reason}")]
pub struct ChallengeError {
    /// Byte offset in the header where parsing stopped.
    pub offset: usize,
    /// What was wrong.
    pub reason: &'static str,
}

/// One challenge: a scheme and its parameters (names lower-cased, values unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The scheme as sent (compare with [`Challenge::is`]).
    pub scheme: String,
    /// `token68` form, if the challenge carried one instead of parameters.
    pub token68: Option<String>,
    /// Parameters in order; names lower-cased.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// Whether the scheme is `scheme` (case-insensitive).
    pub fn is(&self, scheme: &str) -> bool {
        self.scheme.eq_ignore_ascii_case(scheme)
    }

    /// The first value of parameter `name` (lower case).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a registry asks for, reduced to what the client can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// Send `Authorization: Basic` with the host's credentials.
    Basic,
    /// Fetch a token from `realm` and send `Authorization: Bearer`.
    Bearer(BearerChallenge),
}

/// The parameters of a `Bearer` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerChallenge {
    /// The token endpoint (http or https).
    pub realm: Url,
    /// `service`, passed back to the token endpoint.
    pub service: Option<String>,
    /// The scopes the registry wants (its `scope` parameter, split on spaces).
    pub scopes: Vec<String>,
    /// `error`, e.g. `invalid_token` or `insufficient_scope`.
    pub error: Option<String>,
}

impl fmt::Display for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic => f.write_str("Basic"),
            Auth::Bearer(b) => write!(f, "Bearer realm={}", b.realm),
        }
    }
}

/// Parses a whole header value into its challenges.
pub fn parse(header: &str) -> Result<Vec<Challenge>, ChallengeError> {
    if header.len() > MAX_HEADER_BYTES {
        return Err(ChallengeError {
            offset: MAX_HEADER_BYTES,
            reason: "header too long",
        });
    }
    let mut p = Parser {
        s: header.as_bytes(),
        i: 0,
    };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        p.skip_list_separators();
        if p.done() {
            break;
        }
        if out.len() == MAX_CHALLENGES {
            return Err(p.err("too many challenges"));
        }
        let scheme = p.token().ok_or_else(|| p.err("expected an auth scheme"))?;
        let mut ch = Challenge {
            scheme: scheme.to_owned(),
            token68: None,
            params: Vec::new(),
        };
        // A scheme alone (end, or a comma next) has no parameters.
        if p.done() || p.peek() == Some(b',') {
            out.push(ch);
            continue;
        }
        if !p.skip_spaces() {
            return Err(p.err("expected a space after the auth scheme"));
        }
        if p.done() || p.peek() == Some(b',') {
            out.push(ch);
            continue;
        }
        // token68 (e.g. `Basic abc==`) or the first auth-param.
        let save = p.i;
        if let Some(t68) = p.token68()
            && p.at_challenge_end()
        {
            ch.token68 = Some(t68.to_owned());
            out.push(ch);
            continue;
        }
        p.i = save;
        loop {
            if ch.params.len() == MAX_PARAMS {
                return Err(p.err("too many parameters"));
            }
            let name = p
                .token()
                .ok_or_else(|| p.err("expected a parameter name"))?;
            p.skip_spaces();
            if !p.eat(b'=') {
                return Err(p.err("expected '=' after the parameter name"));
            }
            p.skip_spaces();
            let value = if p.peek() == Some(b'"') {
                p.quoted()?
            } else {
                p.token()
                    .ok_or_else(|| p.err("expected a token or a quoted string"))?
                    .to_owned()
            };
            ch.params.push((name.to_ascii_lowercase(), value));
            p.skip_spaces();
            if p.done() {
                break;
            }
            if !p.eat(b',') {
                return Err(p.err("expected ',' between parameters"));
            }
            p.skip_list_separators();
            if p.done() {
                break;
            }
            // Another parameter of this challenge, or the next challenge's scheme?
            let at = p.i;
            let _ = p.token().ok_or_else(|| p.err("expected a token"))?;
            p.skip_spaces();
            let is_param = p.peek() == Some(b'=');
            p.i = at;
            if !is_param {
                break;
            }
        }
        out.push(ch);
    }
    if out.is_empty() {
        return Err(ChallengeError {
            offset: 0,
            reason: "no challenge",
        });
    }
    Ok(out)
}

/// The challenge the client answers: `Bearer` (with a valid realm) over `Basic`; `None` when
/// neither is offered.
pub fn select(challenges: &[Challenge]) -> Result<Option<Auth>, ChallengeError> {
    if let Some(b) = challenges.iter().find(|c| c.is("bearer")) {
        let realm = b.param("realm").ok_or(ChallengeError {
            offset: 0,
            reason: "Bearer challenge without realm",
        })?;
        let realm = Url::parse(realm).map_err(|_| ChallengeError {
            offset: 0,
            reason: "Bearer realm is not a URL",
        })?;
        if !matches!(realm.scheme(), "http" | "https") || realm.host_str().is_none() {
            return Err(ChallengeError {
                offset: 0,
                reason: "Bearer realm is not an http(s) URL",
            });
        }
        return Ok(Some(Auth::Bearer(BearerChallenge {
            realm,
            service: b.param("service").map(str::to_owned),
            scopes: b
                .param("scope")
                .map(|s| {
                    s.split(' ')
                        .filter(|x| !x.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            error: b.param("error").map(str::to_owned),
        })));
    }
    Ok(challenges
        .iter()
        .any(|c| c.is("basic"))
        .then_some(Auth::Basic))
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl<'a> Parser<'a> {
    fn err(&self, reason: &'static str) -> ChallengeError {
        ChallengeError {
            offset: self.i,
            reason,
        }
    }

    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// Skips spaces and tabs; true if any.
    fn skip_spaces(&mut self) -> bool {
        let start = self.i;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
        self.i > start
    }

    fn skip_list_separators(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.i += 1;
        }
    }

    fn token(&mut self) -> Option<&'a str> {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        (self.i > start).then(|| std::str::from_utf8(&self.s[start..self.i]).unwrap_or(""))
    }

    /// `token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
    fn token68(&mut self) -> Option<&'a str> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
        {
            self.i += 1;
        }
        if self.i == start {
            return None;
        }
        while self.peek() == Some(b'=') {
            self.i += 1;
        }
        Some(std::str::from_utf8(&self.s[start..self.i]).unwrap_or(""))
    }

    /// After a token68: only spaces, then the end or a comma (the next challenge).
    fn at_challenge_end(&mut self) -> bool {
        self.skip_spaces();
        self.done() || self.peek() == Some(b',')
    }

    fn quoted(&mut self) -> Result<String, ChallengeError> {
        debug_assert_eq!(self.peek(), Some(b'"'));
        self.i += 1;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated quoted string")),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b) if b == b'\t' || b >= 0x20 && b != 0x7f => {
                            out.push(b);
                            self.i += 1;
                        }
                        _ => return Err(self.err("bad escape in quoted string")),
                    }
                }
                Some(b) if b == b'\t' || b >= 0x20 && b != 0x7f => {
                    out.push(b);
                    self.i += 1;
                }
                Some(_) => return Err(self.err("control character in quoted string")),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("quoted string is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(h: &str) -> Challenge {
        let mut v = parse(h).unwrap_or_else(|e| panic!("{h:?}: {e}"));
        assert_eq!(v.len(), 1, "{h:?}: {v:?}");
        v.remove(0)
    }

    #[test]
    fn distribution_bearer() {
        let c = one(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert!(c.is("bearer"));
        assert_eq!(c.param("realm"), Some("https://auth.example/token"));
        assert_eq!(c.param("service"), Some("registry.example"));
        assert_eq!(c.param("scope"), Some("repository:a/b:pull,push"));
        let Some(Auth::Bearer(b)) = select(&[c]).unwrap() else {
            panic!("not bearer")
        };
        assert_eq!(b.scopes, ["repository:a/b:pull,push"]);
    }

    #[test]
    fn basic_forms() {
        let c = one(r#"Basic realm="basic-realm""#);
        assert!(c.is("BASIC"));
        assert_eq!(c.param("realm"), Some("basic-realm"));
        assert_eq!(one("Basic").params, []);
        assert_eq!(one("basic abc==").token68.as_deref(), Some("abc=="));
        assert_eq!(select(&[one("Basic")]).unwrap(), Some(Auth::Basic));
    }

    #[test]
    fn several_challenges_and_spacing() {
        let v = parse(
            r#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple",  Bearer realm = "http://127.0.0.1:1/t" , scope="a b""#,
        )
        .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].param("title"), Some(r#"Login to "apps""#));
        assert_eq!(v[0].param("type"), Some("1"));
        assert_eq!(v[1].param("realm"), Some("simple"));
        // Bearer wins over Basic; the scope splits on spaces.
        let Some(Auth::Bearer(b)) = select(&v).unwrap() else {
            panic!()
        };
        assert_eq!(b.scopes, ["a", "b"]);
        assert_eq!(b.realm.as_str(), "http://127.0.0.1:1/t");
    }

    #[test]
    fn parameter_names_are_case_insensitive() {
        let c = one(r#"Bearer Realm="https://a/t",SERVICE=svc"#);
        assert_eq!(c.param("realm"), Some("https://a/t"));
        assert_eq!(c.param("service"), Some("svc"));
    }

    #[test]
    fn errors_name_the_offset() {
        for (h, reason) in [
            ("", "no challenge"),
            ("Bearer realm=\"x", "unterminated quoted string"),
            ("Bearer a=b, c=", "expected a token or a quoted string"),
            (
                "Bearer realm=\"a\" service=b",
                "expected ',' between parameters",
            ),
            ("Bearer\"a\"", "expected a space after the auth scheme"),
            ("\"x\"", "expected an auth scheme"),
            (
                "Bearer realm=\"a\x01\"",
                "control character in quoted string",
            ),
            ("Bearer a b", "expected '=' after the parameter name"),
        ] {
            let e = parse(h).unwrap_err();
            assert_eq!(e.reason, reason, "{h:?}");
        }
        assert!(parse(&"a".repeat(MAX_HEADER_BYTES + 1)).is_err());
        let many = vec!["Basic"; MAX_CHALLENGES + 1].join(", ");
        assert_eq!(parse(&many).unwrap_err().reason, "too many challenges");
    }

    #[test]
    fn bad_realms_are_refused() {
        for h in [
            "Bearer service=x",
            "Bearer realm=\"not a url\"",
            "Bearer realm=\"file:///etc/passwd\"",
        ] {
            assert!(select(&parse(h).unwrap()).is_err(), "{h}");
        }
        assert_eq!(select(&parse("Digest realm=x").unwrap()).unwrap(), None);
    }
}
