//! pkg's search query language, as the depot's `search/0` and `search/1` receive it.
//!
//! A `search/1` request is `CASE_RETURN_NUM_START_TEXT` (`False_2_None_None_hello`): case
//! sensitivity, what to return (1 packages, 2 actions), how many results, how many to skip,
//! and the query text. `search/0` sends the text alone (case-insensitive, actions).
//!
//! The text is pkg's grammar: terms side by side are ANDed (`a b` is `a AND b`), `AND` and
//! `OR` (right-associative, one precedence), parentheses, `'quoted phrases'`,
//! `PACKAGE:ACTION:KEY:TOKEN` structured terms (empty or `*` fields match anything, `\:`
//! escapes a colon, a structured term followed by a term or phrase applies its fields to
//! it), and `pkgs<...>` (also `pkg<`, `pk<`, `p<`, `<`) for package results. Tokens may use
//! `*`, `?` and `[...]` wildcards. The lexer and parser make the trees pkg's PLY grammar
//! makes; their errors are the 400s pkg.depotd answers.

/// pkg refuses queries with more space-separated words than this.
const MAX_TERMS: usize = 100;

/// Why a query is refused (HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum QueryError {
    /// The `search/1` envelope lacks one of its five fields.
    #[error(
        "a search/1 query has five fields, CASE_RETURN_NUM_START_TEXT (e.g. \
         False_2_None_None_hello); got {0:?}"
    )]
    Incomplete(String),
    /// An envelope field has a value pkg does not define.
    #[error("in search/1 query {query:?}, {field} had a bad value {value:?}")]
    Field {
        /// `case_sensitive`, `return_type`, `num_to_return` or `start_point`.
        field: &'static str,
        /// The value sent.
        value: String,
        /// The whole query.
        query: String,
    },
    /// More than [`MAX_TERMS`] words.
    #[error("the query has {0} terms, more than the {MAX_TERMS} pkg allows")]
    TooLong(usize),
    /// The text does not follow pkg's grammar.
    #[error("could not parse query {query:?} at character {pos}: {why}")]
    Parse {
        /// The query text.
        query: String,
        /// 1-based character position of the problem.
        pos: usize,
        /// What was wrong.
        why: String,
    },
    /// `AND`/`OR` between an expression returning actions and one returning packages.
    #[error(
        "'AND' and 'OR' need both sides to produce the same type of results: {actions} \
         produces actions, {packages} produces packages"
    )]
    Mixed {
        /// The side producing actions.
        actions: String,
        /// The side producing packages.
        packages: String,
    },
}

/// A parsed request: the envelope and the query tree.
#[derive(Debug)]
pub(super) struct Request {
    pub case_sensitive: bool,
    pub num: Option<usize>,
    pub start: usize,
    pub tree: Node,
}

impl Request {
    /// A `search/1` query string.
    pub fn v1(s: &str) -> Result<Self, QueryError> {
        let mut f = s.splitn(5, '_');
        let (Some(case), Some(ret), Some(num), Some(start), Some(text)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(QueryError::Incomplete(s.to_owned()));
        };
        let bad = |field: &'static str, value: &str| QueryError::Field {
            field,
            value: value.to_owned(),
            query: s.to_owned(),
        };
        let case_sensitive = match case {
            "True" => true,
            "False" => false,
            v => return Err(bad("case_sensitive", v)),
        };
        let count = |field: &'static str, v: &str| match v {
            "None" => Ok(None),
            n => n
                .trim()
                .parse::<usize>()
                .map(Some)
                .map_err(|_| bad(field, v)),
        };
        let num = count("num_to_return", num)?;
        let start = count("start_point", start)?.unwrap_or(0);
        let packages = match ret.trim().parse::<u8>() {
            Ok(1) => true,
            Ok(2) => false,
            _ => return Err(bad("return_type", ret)),
        };
        Self::new(text, case_sensitive, packages, num, start)
    }

    /// A `search/0` token: pkg.depotd makes it a case-insensitive query for actions.
    pub fn v0(text: &str) -> Result<Self, QueryError> {
        Self::new(text, false, false, None, 0)
    }

    fn new(
        text: &str,
        case_sensitive: bool,
        packages: bool,
        num: Option<usize>,
        start: usize,
    ) -> Result<Self, QueryError> {
        let words = text.split(' ').count();
        if words > MAX_TERMS {
            return Err(QueryError::TooLong(words));
        }
        let mut tree = parse(text)?;
        if packages {
            tree = tree.into_packages()?;
        }
        Ok(Self {
            case_sensitive,
            num,
            start,
            tree,
        })
    }
}

/// One term: a token (maybe a glob) and the structured fields restricting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Term {
    /// The token, trimmed.
    pub token: String,
    /// Whether the token (as written, before a phrase's trailing `*`) has a wildcard: pkg
    /// matches exact tokens otherwise (when case-sensitive).
    pub glob: bool,
    /// The package field as a prefix glob (`demo/he` becomes `demo/he*`), if restricted.
    pub package: Option<String>,
    /// The action type, if restricted.
    pub action: Option<String>,
    /// The index key (`basename`, `path`, `pkg.summary`, ...), if restricted.
    pub key: Option<String>,
}

impl Term {
    fn new(token: &str) -> Self {
        let token = token.trim();
        Self {
            token: token.to_owned(),
            glob: token.contains(['*', '?', '[']),
            package: None,
            action: None,
            key: None,
        }
    }

    fn restrict(&mut self, (package, action, key): &Fields) {
        let field = |s: &str| (!s.is_empty() && s != "*").then(|| s.to_owned());
        self.package = field(package).map(|p| if p.ends_with('*') { p } else { p + "*" });
        self.action = field(action);
        self.key = field(key);
    }

    fn describe(&self) -> String {
        let f = |v: &Option<String>| v.as_deref().unwrap_or("").replace(':', "\\:");
        format!(
            "{}:{}:{}:{}",
            f(&self.package),
            f(&self.action),
            f(&self.key),
            self.token.replace(':', "\\:")
        )
    }
}

/// A query tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// Actions one of whose tokens matches.
    Term(Term),
    /// Actions matching the term (the phrase's first word, then a wildcard) whose line
    /// contains the whole phrase.
    Phrase { term: Term, phrase: String },
    /// Both (for actions: the right side searched within the left side's results).
    And(Box<Node>, Box<Node>),
    /// Either.
    Or(Box<Node>, Box<Node>),
    /// The packages of the inner results.
    Packages(Box<Node>),
}

impl Node {
    /// Whether the node produces packages rather than actions.
    pub fn returns_packages(&self) -> bool {
        match self {
            Node::Packages(_) => true,
            Node::And(l, _) | Node::Or(l, _) => l.returns_packages(),
            Node::Term(_) | Node::Phrase { .. } => false,
        }
    }

    fn boolean(and: bool, l: Node, r: Node) -> Result<Node, QueryError> {
        if l.returns_packages() != r.returns_packages() {
            let (actions, packages) = if l.returns_packages() { (r, l) } else { (l, r) };
            return Err(QueryError::Mixed {
                actions: actions.describe(),
                packages: packages.describe(),
            });
        }
        let (l, r) = (Box::new(l), Box::new(r));
        Ok(if and { Node::And(l, r) } else { Node::Or(l, r) })
    }

    /// pkg's `propagate_pkg_return`: every action-producing leaf is wrapped to produce
    /// packages (what `search/1` return type 1 asks for).
    fn into_packages(self) -> Result<Node, QueryError> {
        match self {
            Node::And(l, r) => Node::boolean(true, l.into_packages()?, r.into_packages()?),
            Node::Or(l, r) => Node::boolean(false, l.into_packages()?, r.into_packages()?),
            n @ Node::Packages(_) => Ok(n),
            n => Ok(Node::Packages(Box::new(n))),
        }
    }

    fn describe(&self) -> String {
        match self {
            Node::Term(t) => t.describe(),
            Node::Phrase { term, phrase } => {
                let fields = term.describe();
                let fields = &fields[..fields.len() - term.token.replace(':', "\\:").len()];
                format!("{fields}'{phrase}'")
            }
            Node::And(l, r) => format!("({} AND {})", l.describe(), r.describe()),
            Node::Or(l, r) => format!("({} OR {})", l.describe(), r.describe()),
            Node::Packages(n) => format!("p<{}>", n.describe()),
        }
    }
}

/// The package, action type and key fields of a structured term.
type Fields = (String, String, String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Term(String),
    /// A structured term: its fields and the token after the last unescaped colon.
    FTerm(Fields, String),
    LParen,
    RParen,
    And,
    Or,
    Quote(char),
    LBrace,
    RBrace,
}

/// Python's `\s`, what pkg's token patterns exclude.
fn space(c: char) -> bool {
    c.is_whitespace()
}

/// The end of the token pattern `[^\s(<first>][^\s]*[^\s<last>]|[^\s<single>]` starting
/// at `i`, within the non-space run ending at `run`.
fn token_end(
    c: &[char],
    i: usize,
    run: usize,
    first: &str,
    last: &str,
    single: &str,
) -> Option<usize> {
    if i >= run || first.contains(c[i]) {
        return (i < run && !single.contains(c[i])).then_some(i + 1);
    }
    if let Some(p) = (i + 1..run).rev().find(|&p| !last.contains(c[p])) {
        return Some(p + 1);
    }
    (!single.contains(c[i])).then_some(i + 1)
}

/// Splits a structured term on unescaped colons (`\:` is a colon inside a field).
fn fields(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in text.split(':') {
        match out.last_mut() {
            Some(prev) if prev.ends_with('\\') => {
                prev.pop();
                prev.push(':');
                prev.push_str(part);
            }
            _ => out.push(part.to_owned()),
        }
    }
    out
}

fn reserved(word: String) -> Tok {
    match word.as_str() {
        "AND" => Tok::And,
        "OR" => Tok::Or,
        _ => Tok::Term(word),
    }
}

/// pkg's lexer: each token with its 0-based character position.
fn lex(text: &str) -> Result<Vec<(usize, Tok)>, QueryError> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i] == ' ' {
            i += 1;
            continue;
        }
        let run = (i..c.len()).find(|&j| space(c[j])).unwrap_or(c.len());
        // `([pP]([kK]([gG][sS]?)?)?)?<`
        if let Some(k) = (0..=4).find(|&k| {
            i + k < c.len()
                && c[i + k] == '<'
                && c[i..i + k]
                    .iter()
                    .zip("pkgs".chars())
                    .all(|(a, b)| a.eq_ignore_ascii_case(&b))
        }) {
            out.push((i, Tok::LBrace));
            i += k + 1;
            continue;
        }
        if c[i] == '>' {
            out.push((i, Tok::RBrace));
            i += 1;
            continue;
        }
        // A structured term: the colon is the last one in the run (after a prefix that does
        // not start with a quote or parenthesis), else one right here.
        let last_colon = (i + 1..run)
            .rev()
            .find(|&p| c[p] == ':')
            .filter(|_| !"'\"(".contains(c[i]));
        if let Some(colon) = last_colon.or((c[i] == ':').then_some(i)) {
            let end = token_end(&c, colon + 1, run, "('\"", ")'\">", "()'\">").unwrap_or(colon + 1);
            let text: String = c[i..end].iter().collect();
            let mut f = fields(&text);
            let token = f.pop().unwrap_or_default();
            let tok = if f.is_empty() {
                reserved(token)
            } else {
                let key = f.pop().unwrap_or_default();
                let action = f.pop().unwrap_or_default();
                let package = f.pop().unwrap_or_default();
                Tok::FTerm((package, action, key), token)
            };
            out.push((i, tok));
            i = end;
            continue;
        }
        if let Some(end) = token_end(&c, i, run, "('\"", ")'\">", "()'\"") {
            out.push((i, reserved(c[i..end].iter().collect())));
            i = end;
            continue;
        }
        let tok = match c[i] {
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            q @ ('\'' | '"') => Tok::Quote(q),
            other => {
                return Err(QueryError::Parse {
                    query: text.to_owned(),
                    pos: i + 1,
                    why: format!("unparseable character {other:?}"),
                });
            }
        };
        out.push((i, tok));
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok)>,
    at: usize,
}

fn parse(text: &str) -> Result<Node, QueryError> {
    let mut p = Parser {
        text,
        toks: lex(text)?,
        at: 0,
    };
    let node = p.xterm()?;
    match p.peek() {
        None => Ok(node),
        Some(_) => Err(p.error("unexpected")),
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }

    fn error(&self, why: &str) -> QueryError {
        let (pos, why) = match self.toks.get(self.at) {
            Some((pos, tok)) => (pos + 1, format!("{why} {tok:?}")),
            None => (self.text.chars().count() + 1, format!("{why} end of query")),
        };
        QueryError::Parse {
            query: self.text.to_owned(),
            pos,
            why,
        }
    }

    /// `xterm: basetermlist | xterm AND xterm | xterm OR xterm` (right-associative).
    fn xterm(&mut self) -> Result<Node, QueryError> {
        let left = self.baseterms()?;
        match self.peek() {
            Some(Tok::And) => {
                self.at += 1;
                Node::boolean(true, left, self.xterm()?)
            }
            Some(Tok::Or) => {
                self.at += 1;
                Node::boolean(false, left, self.xterm()?)
            }
            _ => Ok(left),
        }
    }

    /// `basetermlist: baseterm | baseterm basetermlist`: an implicit AND, nested right.
    fn baseterms(&mut self) -> Result<Node, QueryError> {
        let first = self.baseterm()?;
        let starts_baseterm = matches!(
            self.peek(),
            Some(Tok::Term(_) | Tok::FTerm(..) | Tok::Quote(_) | Tok::LParen | Tok::LBrace)
        );
        if starts_baseterm {
            Node::boolean(true, first, self.baseterms()?)
        } else {
            Ok(first)
        }
    }

    fn baseterm(&mut self) -> Result<Node, QueryError> {
        match self.peek().cloned() {
            Some(Tok::Term(t)) => {
                self.at += 1;
                Ok(Node::Term(Term::new(&t)))
            }
            Some(Tok::FTerm(fields, token)) => {
                self.at += 1;
                self.fterm(fields, token)
            }
            Some(Tok::Quote(q)) => self.phrase(q),
            Some(Tok::LParen) => {
                self.at += 1;
                let inner = self.xterm()?;
                self.expect(&Tok::RParen)?;
                Ok(inner)
            }
            Some(Tok::LBrace) => {
                self.at += 1;
                let inner = self.xterm()?;
                self.expect(&Tok::RBrace)?;
                Ok(Node::Packages(Box::new(inner)))
            }
            _ => Err(self.error("expected a term, found")),
        }
    }

    fn expect(&mut self, want: &Tok) -> Result<(), QueryError> {
        if self.peek() == Some(want) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {want:?}, found")))
        }
    }

    /// `fterm: FTERM ftermarg | FTERM fterm | FTERM`, the FTERM already taken.
    fn fterm(&mut self, fields: Fields, token: String) -> Result<Node, QueryError> {
        let arg = match self.peek().cloned() {
            Some(Tok::Term(t)) => {
                self.at += 1;
                Some(Node::Term(Term::new(&t)))
            }
            Some(Tok::Quote(q)) => Some(self.phrase(q)?),
            Some(Tok::FTerm(f, t)) => {
                self.at += 1;
                let pos = self.at;
                let inner = self.fterm(f, t)?;
                if token.is_empty() {
                    self.at = pos - 1;
                    return Err(self.error("a structured term with no token cannot qualify"));
                }
                Some(inner)
            }
            _ => None,
        };
        let mut term = Term::new(if token.is_empty() && arg.is_none() {
            "*"
        } else {
            &token
        });
        term.restrict(&fields);
        match arg {
            None => Ok(Node::Term(term)),
            Some(Node::Term(mut t)) if token.is_empty() => {
                t.restrict(&fields);
                Ok(Node::Term(t))
            }
            Some(Node::Phrase {
                term: mut t,
                phrase,
            }) if token.is_empty() => {
                t.restrict(&fields);
                Ok(Node::Phrase { term: t, phrase })
            }
            Some(arg) => Node::boolean(true, Node::Term(term), arg),
        }
    }

    /// `phraseterm: QUOTE TERM+ QUOTE` (the same quote both ends).
    fn phrase(&mut self, quote: char) -> Result<Node, QueryError> {
        self.at += 1;
        let mut words = Vec::new();
        while let Some(Tok::Term(w)) = self.peek().cloned() {
            self.at += 1;
            words.push(w);
        }
        if words.is_empty() {
            return Err(self.error("expected a word in a phrase, found"));
        }
        self.expect(&Tok::Quote(quote))?;
        let mut term = Term::new(&words[0]);
        if words.len() > 1 && !term.token.ends_with('*') {
            // A prefix match on the first word; pkg leaves `glob` as it was.
            term.token.push('*');
        }
        Ok(Node::Phrase {
            term,
            phrase: words.join(" "),
        })
    }
}

/// fnmatch-style glob (`*`, `?`, `[...]`, `[!...]`) over chars, whole string.
pub(super) fn glob(p: &[char], t: &[char]) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some('*') => (0..=t.len()).any(|k| glob(&p[1..], &t[k..])),
        Some('?') => !t.is_empty() && glob(&p[1..], &t[1..]),
        Some('[') => match class(&p[1..]) {
            Some((matches, rest)) => {
                !t.is_empty() && matches(t[0]) && glob(&p[1 + rest..], &t[1..])
            }
            // No closing `]`: a literal `[`.
            None => t.first() == Some(&'[') && glob(&p[1..], &t[1..]),
        },
        Some(&c) => t.first() == Some(&c) && glob(&p[1..], &t[1..]),
    }
}

type ClassMatch<'a> = Box<dyn Fn(char) -> bool + 'a>;

/// A bracket expression after its `[`: its matcher and how many chars it used (with `]`).
fn class(p: &[char]) -> Option<(ClassMatch<'_>, usize)> {
    let negate = p.first() == Some(&'!');
    let body_start = usize::from(negate);
    // A `]` right after `[` or `[!` is literal.
    let close = (body_start + 1..p.len()).find(|&i| p[i] == ']')?;
    let body = &p[body_start..close];
    let m = move |c: char| {
        let mut i = 0;
        let mut hit = false;
        while i < body.len() {
            if i + 2 < body.len() && body[i + 1] == '-' {
                hit |= body[i] <= c && c <= body[i + 2];
                i += 3;
            } else {
                hit |= body[i] == c;
                i += 1;
            }
        }
        hit != negate
    };
    Some((Box::new(m), close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(token: &str) -> Node {
        Node::Term(Term::new(token))
    }

    fn and(l: Node, r: Node) -> Node {
        Node::And(Box::new(l), Box::new(r))
    }

    fn fielded(p: &str, a: &str, k: &str, token: &str) -> Node {
        let mut t = Term::new(token);
        t.restrict(&(p.into(), a.into(), k.into()));
        Node::Term(t)
    }

    #[test]
    fn terms_side_by_side_are_anded_and_boolean_operators_nest_right() {
        assert_eq!(
            parse("a b c").unwrap(),
            and(term("a"), and(term("b"), term("c")))
        );
        assert_eq!(
            parse("a b AND c").unwrap(),
            and(and(term("a"), term("b")), term("c"))
        );
        let or = |l, r| Node::Or(Box::new(l), Box::new(r));
        assert_eq!(
            parse("a AND b OR c").unwrap(),
            and(term("a"), or(term("b"), term("c")))
        );
        assert_eq!(
            parse("(a OR b) c").unwrap(),
            and(or(term("a"), term("b")), term("c"))
        );
    }

    #[test]
    fn structured_terms_split_on_unescaped_colons_and_qualify_what_follows() {
        // What the pkg client sends for `hello`, `file:basename:hel*` and `demo/hello:set::`.
        assert_eq!(parse(":::hello").unwrap(), fielded("", "", "", "hello"));
        assert_eq!(
            parse(":file:basename:hel*").unwrap(),
            fielded("", "file", "basename", "hel*")
        );
        let Node::Term(t) = parse("demo/hello:set::").unwrap() else {
            panic!()
        };
        assert_eq!(
            (
                t.package.as_deref(),
                t.action.as_deref(),
                t.key,
                t.token.as_str()
            ),
            (Some("demo/hello*"), Some("set"), None, "*")
        );
        // `key: token` applies the fields to the next term; a token of its own ANDs.
        assert_eq!(
            parse("basename: hello").unwrap(),
            fielded("", "", "basename", "hello")
        );
        assert_eq!(
            parse("basename:hello bin").unwrap(),
            and(fielded("", "", "basename", "hello"), term("bin"))
        );
        assert_eq!(parse("a\\:b").unwrap(), term("a:b"));
        assert_eq!(parse(":::a\\:b").unwrap(), fielded("", "", "", "a:b"));
        assert!(parse("a: b:c").is_err());
    }

    #[test]
    fn phrases_packages_and_what_pkg_refuses() {
        let Node::Phrase { term, phrase } = parse(":::'Says h'").unwrap() else {
            panic!()
        };
        assert_eq!(
            (term.token.as_str(), term.glob, phrase.as_str()),
            ("Says*", false, "Says h")
        );
        assert_eq!(
            parse("p<:::hel*>").unwrap(),
            Node::Packages(Box::new(fielded("", "", "", "hel*")))
        );
        assert!(matches!(parse("pkgs<a> b"), Err(QueryError::Mixed { .. })));
        for bad in ["", "(a", "a)", "'a", "a\tb", "AND", "<a"] {
            assert!(
                matches!(parse(bad), Err(QueryError::Parse { .. })),
                "{bad:?}: {:?}",
                parse(bad)
            );
        }
    }

    #[test]
    fn envelopes_follow_pkgs_query_strings() {
        let r = Request::v1("True_1_10_2_a b").unwrap();
        assert!(r.case_sensitive && r.tree.returns_packages());
        assert_eq!((r.num, r.start), (Some(10), 2));
        assert_eq!(
            r.tree,
            Node::And(
                Box::new(Node::Packages(Box::new(term("a")))),
                Box::new(Node::Packages(Box::new(term("b"))))
            )
        );
        assert!(matches!(
            Request::v1("False_2_x"),
            Err(QueryError::Incomplete(_))
        ));
        for bad in [
            "Maybe_2_None_None_a",
            "False_3_None_None_a",
            "False_2_x_None_a",
        ] {
            assert!(
                matches!(Request::v1(bad), Err(QueryError::Field { .. })),
                "{bad}"
            );
        }
        let long = vec!["a"; 101].join(" ");
        assert_eq!(Request::v0(&long).unwrap_err(), QueryError::TooLong(101));
    }

    #[test]
    fn globs_are_fnmatch() {
        let g = |p: &str, t: &str| {
            glob(
                &p.chars().collect::<Vec<_>>(),
                &t.chars().collect::<Vec<_>>(),
            )
        };
        assert!(g("h*o", "hello") && g("h?llo", "hello") && g("h[ae]llo", "hello"));
        assert!(!g("h[!e]llo", "hello") && g("[a-c]x", "bx") && g("a[", "a["));
        assert!(!g("h?", "h") && g("*", ""));
    }
}
