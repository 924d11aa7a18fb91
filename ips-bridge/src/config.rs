//! pkg's INI configuration files (`pkg5.repository`, `pkg5.image`), read and written like
//! Python's `RawConfigParser`: `[section]` headers, `key = value` (or `key: value`) lines,
//! case kept, `#`/`;` comment lines, indented continuation lines, no inline comments.

use std::fmt;

/// An INI document: sections in order, each with keys in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IniFile {
    sections: Vec<(String, Vec<(String, String)>)>,
}

/// Why an INI file did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: line {line}: {message}")]
pub struct IniError {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl IniFile {
    /// An empty document.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `text`; `file` names the input in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, IniError> {
        let mut doc = Self::new();
        let err = |line: usize, message: &str| IniError {
            file: file.to_owned(),
            line,
            message: message.to_owned(),
        };
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim_end();
            let t = line.trim_start();
            if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
                continue;
            }
            if line.starts_with([' ', '\t']) {
                // Continuation of the previous value.
                let (_, keys) = doc
                    .sections
                    .last_mut()
                    .ok_or_else(|| err(n + 1, "continuation line outside a section"))?;
                let (_, v) = keys
                    .last_mut()
                    .ok_or_else(|| err(n + 1, "continuation line without a key"))?;
                v.push('\n');
                v.push_str(t);
                continue;
            }
            if let Some(name) = t.strip_prefix('[') {
                let name = name
                    .strip_suffix(']')
                    .ok_or_else(|| err(n + 1, "unterminated section header"))?;
                doc.sections.push((name.to_owned(), Vec::new()));
                continue;
            }
            let (_, keys) = doc
                .sections
                .last_mut()
                .ok_or_else(|| err(n + 1, "key outside a section"))?;
            let at = t
                .find(['=', ':'])
                .ok_or_else(|| err(n + 1, "expected key = value"))?;
            keys.push((t[..at].trim().to_owned(), t[at + 1..].trim().to_owned()));
        }
        Ok(doc)
    }

    /// The value of `key` in `section`.
    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.sections
            .iter()
            .filter(|(s, _)| s == section)
            .flat_map(|(_, keys)| keys.iter())
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The keys and values of `section`, in order.
    pub fn section(&self, section: &str) -> Vec<(&str, &str)> {
        self.sections
            .iter()
            .filter(|(s, _)| s == section)
            .flat_map(|(_, keys)| keys.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// Section names, in order.
    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|(s, _)| s.as_str())
    }

    /// Sets `key` in `section`, adding the section at the end when new.
    pub fn set(&mut self, section: &str, key: &str, value: &str) {
        let idx = match self.sections.iter().position(|(s, _)| s == section) {
            Some(i) => i,
            None => {
                self.sections.push((section.to_owned(), Vec::new()));
                self.sections.len() - 1
            }
        };
        let keys = &mut self.sections[idx].1;
        match keys.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value.to_owned(),
            None => keys.push((key.to_owned(), value.to_owned())),
        }
    }
}

impl fmt::Display for IniFile {
    /// Python's `RawConfigParser.write` form: `[section]`, `key = value`, a blank line after
    /// each section; multi-line values continue on tab-indented lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (s, keys) in &self.sections {
            writeln!(f, "[{s}]")?;
            for (k, v) in keys {
                writeln!(f, "{k} = {}", v.replace('\n', "\n\t"))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Formats a list as a Python literal, as pkg stores lists in its INI files:
/// `['a', 'b']`, `[]`.
pub fn python_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items
        .iter()
        .map(|s| {
            format!(
                "'{}'",
                s.as_ref().replace('\\', "\\\\").replace('\'', "\\'")
            )
        })
        .collect();
    format!("[{}]", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pkg5_repository() {
        let text = "[publisher]\nprefix = example.org\n\n[repository]\nversion = 4\ntrust-anchor-directory = /etc/certs/CA/\nsignature-required-names = []\ncheck-certificate-revocation = False\n# comment\n[CONFIGURATION]\nversion: 4\ndescription = one\n  two\n";
        let ini = IniFile::parse("pkg5.repository", text).unwrap();
        assert_eq!(ini.get("publisher", "prefix"), Some("example.org"));
        assert_eq!(ini.get("repository", "version"), Some("4"));
        assert_eq!(ini.get("CONFIGURATION", "version"), Some("4"));
        assert_eq!(ini.get("CONFIGURATION", "description"), Some("one\ntwo"));
        // No inline comments: the text after '=' is the value.
        let ini = IniFile::parse("x", "[a]\nk = v # not a comment\n").unwrap();
        assert_eq!(ini.get("a", "k"), Some("v # not a comment"));
        let reparsed = IniFile::parse("x", &ini.to_string()).unwrap();
        assert_eq!(reparsed, ini);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = IniFile::parse("pkg5.image", "[image]\nversion = 4\nbogus\n").unwrap_err();
        assert_eq!(e.to_string(), "pkg5.image: line 3: expected key = value");
        assert!(IniFile::parse("f", "k = v\n").is_err());
        assert!(IniFile::parse("f", "[a\n").is_err());
    }

    #[test]
    fn python_lists() {
        assert_eq!(python_list::<&str>(&[]), "[]");
        assert_eq!(python_list(&["a", "it's"]), "['a', 'it\\'s']");
    }
}
