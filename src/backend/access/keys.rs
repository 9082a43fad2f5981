//! A `gallery_key_file`: one key per line, `label:roles:key` (roles a comma
//! list of `recognize`, `search`, `manage`) or `label:key` (every role).
//! Fields are read by what they are, not by their count alone: a middle
//! field must be a role list, and a last field that reads as a role list is
//! a key left out (`ui:recognize,search` would otherwise be a two-field line
//! whose 16-character "key" holds every role). Whatever could be a mistake
//! fails the load: a line without a label, an unknown role, a missing key, a
//! key of fewer than 128 bits (22 base64 characters, or 32 hex digits), a
//! key made of role words and separators, a key or label twice. Keys are
//! held as BLAKE3 hashes; no message shows one, nor any text of the line.

use std::fmt;

/// The fewest characters of a key of 128 bits: base64 or base64url (6 bits
/// a character; `=` padding not counted), or hex digits alone (4 bits).
const MIN_BASE64: usize = 22;
const MIN_HEX: usize = 32;

/// How to make a key, for the messages.
const MAKE_ONE: &str = "make one with `openssl rand -base64 24`";

/// What a key may do: a set of roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles(u8);

impl Roles {
    /// Photos and frames answered with names, and detection only.
    pub const RECOGNIZE: Roles = Roles(1);
    /// `EMBEDDING` input, `top_k` above 1, a threshold above the model's,
    /// raw embeddings in answers: what reads the gallery beyond a name.
    pub const SEARCH: Roles = Roles(2);
    /// `ENROLL`, `FORGET`, `LIST` and the record of changes.
    pub const MANAGE: Roles = Roles(4);
    pub const ALL: Roles = Roles(7);
    const NAMED: [(Roles, &'static str); 3] = [
        (Roles::RECOGNIZE, "recognize"),
        (Roles::SEARCH, "search"),
        (Roles::MANAGE, "manage"),
    ];

    pub fn holds(self, other: Roles) -> bool {
        self.0 & other.0 == other.0
    }

    /// A comma list of role names; an unknown or empty one is an error.
    fn parse(list: &str) -> Result<Roles, String> {
        let mut roles = Roles(0);
        for word in list.split(',').map(str::trim) {
            match Roles::NAMED.iter().find(|(_, name)| *name == word) {
                Some((role, _)) => roles.0 |= role.0,
                // Not echoed: in a `label:key` line whose key holds a `:`,
                // this field is the key's start.
                None => {
                    return Err("an unknown role (roles: recognize, search, manage; in a \
                                label:key line the key cannot hold ':')"
                        .into())
                }
            }
        }
        Ok(roles)
    }
}

impl fmt::Display for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = (Roles::NAMED.iter())
            .filter(|(role, _)| self.holds(*role))
            .map(|(_, name)| *name)
            .collect();
        f.write_str(&names.join(","))
    }
}

/// One key of the file.
pub struct Key {
    pub label: String,
    pub roles: Roles,
    hash: blake3::Hash,
}

/// The keys of a file, in its order.
pub struct GalleryKeys {
    keys: Vec<Key>,
}

impl GalleryKeys {
    /// The keys of a file's text; errors say the line, never its key.
    /// Blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<GalleryKeys, String> {
        let mut keys: Vec<Key> = Vec::new();
        let mut lines: Vec<usize> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))?;
            let twice = |k: &Key| match (k.label == key.label, k.hash == key.hash) {
                (true, _) => Some(format!("the label '{}'", key.label)),
                (_, true) => Some("the same key".to_string()),
                _ => None,
            };
            if let Some((i, what)) = keys
                .iter()
                .enumerate()
                .find_map(|(i, k)| Some((i, twice(k)?)))
            {
                return Err(format!("line {}: {what} as on line {}", n + 1, lines[i]));
            }
            keys.push(key);
            lines.push(n + 1);
        }
        if keys.is_empty() {
            return Err("no key in the file: it would refuse every request".into());
        }
        Ok(GalleryKeys { keys })
    }

    /// The key `presented` is, if any. Every key is compared (constant-time
    /// hash equality): the time of a refusal tells nothing about the keys.
    pub fn find(&self, presented: &str) -> Option<&Key> {
        let hash = blake3::hash(presented.as_bytes());
        let mut found = None;
        for key in &self.keys {
            if key.hash == hash && found.is_none() {
                found = Some(key);
            }
        }
        found
    }

    pub fn iter(&self) -> impl Iterator<Item = &Key> {
        self.keys.iter()
    }
}

/// `label:roles:key` or `label:key`; the key is everything after the
/// field before it (it may hold a `:`).
fn parse_line(line: &str) -> Result<Key, String> {
    let expected = "expected label:roles:key or label:key";
    let mut fields = line.splitn(3, ':').map(str::trim);
    let (Some(label), Some(second)) = (fields.next(), fields.next()) else {
        return Err(format!(
            "{expected}: every key has a label, which the record of changes names"
        ));
    };
    if !is_label(label) {
        return Err(format!(
            "{expected}: a label is 1 to 64 letters, digits, '_', '-', '.'"
        ));
    }
    let (roles, key) = match fields.next() {
        Some(key) => (Roles::parse(second)?, key),
        None => (Roles::ALL, second),
    };
    if looks_like_roles(key) {
        return Err(format!(
            "the key of '{label}' is missing: its last field is a role list \
             (expected label:roles:key)"
        ));
    }
    strong_enough(key).map_err(|why| format!("the key of '{label}' {why}; {MAKE_ONE}"))?;
    Ok(Key {
        label: label.to_string(),
        roles,
        hash: blake3::hash(key.as_bytes()),
    })
}

/// A key of 128 bits or more, by its alphabet: hex digits alone carry 4
/// bits a character, anything else is counted as base64 (6 bits), and what
/// is left once role words and separators are taken out must reach that
/// length too (`recognize,search,manage,recognize` is long but guessable).
fn strong_enough(key: &str) -> Result<(), String> {
    let need = |text: &str| match text.chars().all(|c| c.is_ascii_hexdigit()) {
        true => MIN_HEX,
        false => MIN_BASE64,
    };
    let counted = key.trim_end_matches('=');
    if counted.chars().count() < need(counted) {
        return Err(format!(
            "holds fewer than 128 bits (at least {MIN_BASE64} base64 characters, or \
             {MIN_HEX} hex digits)"
        ));
    }
    let mut rest = key.to_ascii_lowercase();
    for word in [
        "recognize",
        "recognise",
        "search",
        "manage",
        "roles",
        "role",
        "all",
    ] {
        rest = rest.replace(word, "");
    }
    rest.retain(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'));
    if rest.chars().count() < need(&rest) {
        return Err("is made of role words and separators".into());
    }
    Ok(())
}

/// A field that reads as a role list whatever its case or spaces (the
/// mistake is a key left out, not a key that happens to spell roles).
fn looks_like_roles(field: &str) -> bool {
    Roles::parse(&field.to_ascii_lowercase().replace(' ', "")).is_ok()
}

/// A label: 1 to 64 letters, digits, `_`, `-`, `.`.
fn is_label(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1-0123456789abcdef-ghijk";
    const K2: &str = "k2-0123456789abcdef-ghijk";

    #[test]
    fn roles_two_field_lines_comments_and_blank_lines() {
        let text = format!(
            "# ops\n\nops:{K1}\n  cam : recognize, search : {K2}\nx:manage:a:b:0123456789abcdefghijk\n"
        );
        let keys = GalleryKeys::parse(&text).unwrap();
        let ops = keys.find(K1).unwrap();
        assert_eq!((ops.label.as_str(), ops.roles), ("ops", Roles::ALL));
        let cam = keys.find(K2).unwrap();
        assert_eq!(cam.label, "cam");
        assert!(cam.roles.holds(Roles::SEARCH) && !cam.roles.holds(Roles::MANAGE));
        assert_eq!(cam.roles.to_string(), "recognize,search");
        assert_eq!(
            keys.find("a:b:0123456789abcdefghijk").unwrap().label,
            "x",
            "a key may hold ':'"
        );
        assert!(keys.find(&format!("ops:{K1}")).is_none() && keys.find("").is_none());
        assert!(keys.find(&K1[1..]).is_none());
    }

    #[test]
    fn keys_of_128_bits_load_whatever_their_alphabet() {
        for key in [
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ",       // base64url, 26
            "q8bz1NwzQ3m+Jx0b/2v4uY8Kp7rT",     // base64 with + and /
            "7f3a91c2e4b5d6a7c0ffee0123456789", // 32 hex digits
            "r0Z3kQ9x_aLm-4PqV8sT2w==",         // 22 before the padding
        ] {
            let keys = GalleryKeys::parse(&format!("ops:{key}\n"))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(keys.find(key).is_some(), "{key}");
        }
    }

    #[test]
    fn every_mistake_is_refused_by_line_without_the_key() {
        let cases = [
            ("# nothing\n\n".to_string(), "no key in the file"),
            (format!("{K1}\n"), "line 1: expected label:roles:key"),
            (
                format!("ops:{K1}\nbad label:{K2}\n"),
                "line 2: expected label:roles:key",
            ),
            (
                "ops:k-21-characters-xyz\n".to_string(),
                "line 1: the key of 'ops' holds fewer than 128 bits",
            ),
            (
                "ops:0123456789abcdef0123456789abcde\n".to_string(),
                "32 hex digits",
            ),
            (
                format!("ops:{K1}\nops:{K2}\n"),
                "line 2: the label 'ops' as on line 1",
            ),
            (
                format!("ops:{K1}\n\ncam:recognize:{K1}\n"),
                "line 3: the same key as on line 1",
            ),
            (format!("ops:recognise:{K1}\n"), "line 1: an unknown role"),
            (format!("ops::{K1}\n"), "an unknown role"),
            (
                "ops:k1-0123:456789abcdef-ghijk\n".to_string(),
                "an unknown role",
            ),
            (
                format!("ops:{K1}\nui:recognize,search\n"),
                "line 2: the key of 'ui' is missing",
            ),
            (
                "ui:manage:Recognize, Search,Manage\n".to_string(),
                "line 1: the key of 'ui' is missing",
            ),
            (format!("ui:{K1}:recognize\n"), "line 1: an unknown role"),
            // Near role lists read as two fields: a guessable "key" with every role.
            ("ui:recognise,search\n".to_string(), "fewer than 128 bits"),
            ("ui:recognize search\n".to_string(), "fewer than 128 bits"),
            ("ui:recognize,search,\n".to_string(), "fewer than 128 bits"),
            ("ui:recognize;search\n".to_string(), "fewer than 128 bits"),
            ("ui:recognize|search\n".to_string(), "fewer than 128 bits"),
            (
                "ui:recognize|search|manage|recognise\n".to_string(),
                "line 1: the key of 'ui' is made of role words and separators",
            ),
        ];
        for (text, needle) in cases {
            let e = GalleryKeys::parse(&text).err().unwrap();
            assert!(e.contains(needle), "{text:?}: {e}");
            if e.contains("the key of") && !e.contains("missing") {
                assert!(e.contains("openssl rand -base64 24"), "{e}");
            }
            assert!(
                !e.contains(K1) && !e.contains(K2) && !e.contains("k1-0123"),
                "{e}"
            );
        }
    }
}
