//! What a person may be called.

use crate::error::{Error, Result};

pub const MAX_NAME_CHARS: usize = 64;

/// Words the JSON answers give a meaning of their own: a person enrolled as
/// "unknown" could not be told from no match.
pub const RESERVED_NAMES: &[&str] = &["unknown", "null"];

/// Validate a person's name, `input` naming where it came from in messages
/// ("ENROLL", "FORGET"): 1-64 characters, letters, digits, space, `_`, `-`,
/// `.`, and not starting with `.` or space (names become file names in user
/// tooling; nothing here may look like a path); not a reserved word.
pub fn validate_name(input: &str, name: &str) -> Result<()> {
    if let Some(word) = RESERVED_NAMES.iter().find(|w| name.eq_ignore_ascii_case(w)) {
        return Err(Error::invalid(format!(
            "{input}: the name {name:?} is reserved (the answers use \"{word}\" for a face that \
             matches nobody); choose another name"
        )));
    }
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(Error::invalid(format!(
            "{input}: name must have 1 to {MAX_NAME_CHARS} characters, got {chars}"
        )));
    }
    if name.starts_with(['.', ' ']) || name.ends_with(' ') {
        return Err(Error::invalid(format!(
            "{input}: name {name:?} must not start with '.' or start/end with a space"
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.')))
    {
        return Err(Error::invalid(format!(
            "{input}: name {name:?} has the character {bad:?}; use letters, digits, space, '_', '-', '.'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["alice", "Bob Smith", "o_neil", "jean-luc.p", "Zoë"] {
            assert!(validate_name("ENROLL", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "../etc",
            "a/b",
            " pad",
            "x\u{0}",
            &"n".repeat(65),
            "tab\t",
        ] {
            assert!(validate_name("ENROLL", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_words_are_refused_naming_the_input() {
        for word in ["unknown", "Unknown", "NULL"] {
            let e = validate_name("FORGET", word).unwrap_err();
            assert!(e.message().contains("reserved"), "{e}");
            assert!(e.message().starts_with("FORGET: "), "{e}");
        }
        assert!(validate_name("ENROLL", "unknown person").is_ok());
    }
}
