//! Names that are not simple text: the form list_files shows them in and the tools accept back.
//!
//! A Unix file name is any bytes but `/` and NUL: it may hold a newline (one entry would read as
//! two lines), a control character, or bytes that are not UTF-8 (a lossy listing would name a
//! file nobody can open). Such a name is shown quoted, in double quotes with backslash escapes:
//! `\n`, `\t`, `\r`, `\"`, `\\`, and `\xHH` for every other control byte (C0, DEL, and each byte
//! of a C1 control) and for every byte that is not part of valid UTF-8. A name that starts with
//! `"` is quoted too, so that a quoted form always means "unquote me". Every other name is shown
//! as it is. Path arguments are read back the same way, one component at a time: a component
//! that is a valid quoted form stands for the bytes it encodes.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The name as list_files and the tools' messages show it (see the module doc).
pub fn show(name: &OsStr) -> Cow<'_, str> {
    let bytes = name.as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.starts_with('"') && !text.chars().any(char::is_control) => {
            Cow::Borrowed(text)
        }
        _ => Cow::Owned(quote(bytes)),
    }
}

/// `bytes` in the quoted form.
fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out
}

/// The bytes a quoted component stands for; None when `text` is not a valid quoted form (it is
/// then taken as written).
fn unquote(text: &str) -> Option<Vec<u8>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.bytes();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next()? {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'"' => out.push(b'"'),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    let hex = [bytes.next()?, bytes.next()?];
                    let hex = std::str::from_utf8(&hex).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                }
                _ => return None,
            },
            // An unescaped quote inside means this was never one of our forms.
            b'"' => return None,
            byte => out.push(byte),
        }
    }
    (!out.is_empty() && !out.contains(&b'/') && !out.contains(&0)).then_some(out)
}

/// A path argument with each quoted component replaced by the bytes it stands for. Borrowed
/// (the usual case) when no component is quoted.
pub fn parse(given: &str) -> Cow<'_, OsStr> {
    if !given.contains('"') {
        return Cow::Borrowed(OsStr::new(given));
    }
    let mut out = Vec::with_capacity(given.len());
    for (i, part) in given.split('/').enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        match unquote(part) {
            Some(bytes) => out.extend_from_slice(&bytes),
            None => out.extend_from_slice(part.as_bytes()),
        }
    }
    Cow::Owned(OsString::from_vec(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn os(bytes: &[u8]) -> &OsStr {
        OsStr::from_bytes(bytes)
    }

    #[test]
    fn simple_names_are_shown_as_they_are() {
        for name in [
            "a.txt",
            "é 日本.md",
            "with space",
            "back\\slash",
            "quote\"inside",
            ".env",
        ] {
            assert_eq!(show(OsStr::new(name)), name);
        }
    }

    #[test]
    fn names_that_are_not_simple_are_quoted_with_escapes() {
        let cases: [(&[u8], &str); 7] = [
            (b"a\nb", r#""a\nb""#),
            (b"tab\there\r", r#""tab\there\r""#),
            (b"caf\xe9", r#""caf\xe9""#),
            (b"\x1b[31mred", r#""\x1b[31mred""#),
            (b"\"quoted\"", r#""\"quoted\"""#),
            ("c1\u{85}".as_bytes(), r#""c1\xc2\x85""#),
            (b"del\x7f \\ x\n", r#""del\x7f \\ x\n""#),
        ];
        for (name, shown) in cases {
            assert_eq!(show(os(name)), shown, "{name:?}");
        }
    }

    #[test]
    fn every_shown_name_parses_back_to_its_bytes() {
        let names: [&[u8]; 8] = [
            b"a\nb",
            b"caf\xe9",
            b"\xff\xfe",
            b"\"",
            b"\"x\"",
            b"plain",
            b"\\x41",
            "é\u{85}\u{202e}".as_bytes(),
        ];
        for name in names {
            let shown = show(os(name)).into_owned();
            assert_eq!(parse(&shown).as_bytes(), name, "{shown}");
            let nested = format!("dir/{shown}/{shown}");
            let mut want = b"dir/".to_vec();
            want.extend_from_slice(name);
            want.push(b'/');
            want.extend_from_slice(name);
            assert_eq!(parse(&nested).as_bytes(), &want[..], "{nested}");
        }
    }

    #[test]
    fn text_that_is_not_a_valid_quoted_form_is_taken_as_written() {
        for given in [
            r#""unterminated"#,
            r#""bad \q escape""#,
            r#""a"b""#,
            r#""""#,
            r#""\x2f""#,
        ] {
            assert_eq!(parse(given), OsStr::new(given), "{given}");
        }
    }
}
