//! Keeping the API keys in the process. One redactor holds the key values in use and replaces
//! them with `[redacted]` wherever text leaves the process: error texts, the log file, stderr,
//! the chat, and tool results on their way to the model. [`hidden_env`] names the variables a
//! command's child process does not inherit, so `env` in run_bash cannot hand a key to the model.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::sync::{Mutex, PoisonError, RwLock};

/// What a key is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Anthropic's key variable.
pub const ANTHROPIC_KEY_VAR: &str = "ANTHROPIC_API_KEY";
/// OpenAI's key variable.
pub const OPENAI_KEY_VAR: &str = "OPENAI_API_KEY";

/// The variables the providers read their keys from (each provider names its own from these:
/// `llm::ProviderKind::key_var`). run_bash's children never get them unless the user names them
/// in `pass_env`.
pub const KEY_VARS: &[&str] = &[ANTHROPIC_KEY_VAR, OPENAI_KEY_VAR];

fn key_vars() -> impl Iterator<Item = &'static str> {
    KEY_VARS.iter().copied()
}

/// Values shorter than this are not treated as secrets: replacing `k` or `test` everywhere would
/// mangle ordinary text and protect nothing a guess would not find.
const MIN_SECRET_CHARS: usize = 8;

/// The secret values to keep in, and the replacing of them.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Longest first, so a key that contains another is replaced whole.
    secrets: RwLock<Vec<String>>,
}

impl Redactor {
    /// A redactor that knows no secret yet.
    pub const fn new() -> Self {
        Redactor {
            secrets: RwLock::new(Vec::new()),
        }
    }

    /// Adds `secret` (surrounding blanks ignored), unless it is too short to be one.
    pub fn add(&self, secret: &str) {
        let secret = secret.trim();
        if secret.chars().count() < MIN_SECRET_CHARS {
            return;
        }
        let mut secrets = self.secrets.write().unwrap_or_else(PoisonError::into_inner);
        if !secrets.iter().any(|s| s == secret) {
            secrets.push(secret.to_string());
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when there was none in it.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let secrets = self.secrets.read().unwrap_or_else(PoisonError::into_inner);
        let mut out = Cow::Borrowed(text);
        for secret in secrets.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// Whether `value` holds a secret.
    fn reveals(&self, value: &OsStr) -> bool {
        let value = value.to_string_lossy();
        let secrets = self.secrets.read().unwrap_or_else(PoisonError::into_inner);
        secrets.iter().any(|s| value.contains(s.as_str()))
    }

    /// The variables of `vars` a child must not get: the providers' key variables and every variable whose value
    /// holds a secret, less those named in `pass_env`.
    fn hidden_in(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        pass_env: &[String],
    ) -> Vec<OsString> {
        let passed = |name: &OsStr| pass_env.iter().any(|p| OsStr::new(p) == name);
        let mut hidden: Vec<OsString> = key_vars()
            .map(OsString::from)
            .filter(|name| !passed(name))
            .collect();
        for (name, value) in vars {
            if !passed(&name) && !hidden.contains(&name) && self.reveals(&value) {
                hidden.push(name);
            }
        }
        hidden
    }
}

/// The process's redactor: the keys of every provider configured, and those in the providers' key variables.
static KEYS: Redactor = Redactor::new();

/// Adds `secret` to the process's redactor.
pub fn protect(secret: &str) {
    KEYS.add(secret);
}

/// Adds the values of the providers' key variables in this process's environment: a key the user has set is
/// kept in whichever provider is in use. Every front end calls this first.
pub fn protect_env_keys() {
    for var in key_vars() {
        if let Ok(value) = std::env::var(var) {
            KEYS.add(&value);
        }
    }
}

/// `text` with the process's secrets replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    KEYS.redact(text)
}

/// [`redact`] of an owned string: the same string back when it holds no secret.
pub fn redact_owned(text: String) -> String {
    let redacted = match redact(&text) {
        Cow::Owned(redacted) => Some(redacted),
        Cow::Borrowed(_) => None,
    };
    redacted.unwrap_or(text)
}

/// The variables a command's child must not inherit from this process (see
/// [`Redactor::hidden_in`]).
pub fn hidden_env(pass_env: &[String]) -> Vec<OsString> {
    KEYS.hidden_in(std::env::vars_os(), pass_env)
}

/// The log file's writer: each record is redacted whole before it is written (tracing's
/// formatter writes one record per writer it makes).
pub struct RedactedLog<W> {
    inner: Mutex<W>,
}

impl<W: Write> RedactedLog<W> {
    /// Writes redacted records to `inner`.
    pub fn new(inner: W) -> Self {
        RedactedLog {
            inner: Mutex::new(inner),
        }
    }
}

/// One record on its way to a [`RedactedLog`]; written when flushed or dropped.
pub struct Record<'a, W: Write> {
    log: &'a RedactedLog<W>,
    buf: Vec<u8>,
}

impl<W: Write> Record<'_, W> {
    fn emit(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf);
        let clean = redact(&text);
        let mut inner = self
            .log
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let written = inner
            .write_all(clean.as_bytes())
            .and_then(|()| inner.flush());
        self.buf.clear();
        written
    }
}

impl<W: Write> Write for Record<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.emit()
    }
}

impl<W: Write> Drop for Record<'_, W> {
    fn drop(&mut self) {
        let _ = self.emit();
    }
}

impl<W: Write> RedactedLog<W> {
    /// A record to write: what is written to it goes to the log redacted, whole, when it is
    /// flushed or dropped (a logging library's writer for one record).
    pub fn record(&self) -> Record<'_, W> {
        Record {
            log: self,
            buf: Vec::new(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_is_replaced_and_short_values_are_not_secrets() {
        let keys = Redactor::new();
        keys.add("sk-short");
        keys.add("  sk-ant-0123456789\n");
        keys.add("k");
        keys.add("");
        let text = "key sk-ant-0123456789 and sk-ant-0123456789, then sk-short; k stays";
        assert_eq!(
            keys.redact(text),
            "key [redacted] and [redacted], then [redacted]; k stays"
        );
        assert!(matches!(keys.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_key_containing_another_is_replaced_whole() {
        let keys = Redactor::new();
        keys.add("secret-1234");
        keys.add("xx-secret-1234-yy");
        assert_eq!(keys.redact("a xx-secret-1234-yy b"), "a [redacted] b");
    }

    #[test]
    fn the_key_variables_and_any_variable_holding_a_key_are_hidden_unless_passed() {
        let keys = Redactor::new();
        keys.add("sk-live-abcdefgh");
        let vars = || {
            [
                ("HOME", "/home/u"),
                ("ANTHROPIC_API_KEY", "sk-live-abcdefgh"),
                ("MY_COPY", "Bearer sk-live-abcdefgh"),
                ("PATH", "/bin"),
            ]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        };
        assert_eq!(
            keys.hidden_in(vars(), &[]),
            ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MY_COPY"].map(OsString::from)
        );
        let passed = ["OPENAI_API_KEY".to_string(), "MY_COPY".to_string()];
        assert_eq!(
            keys.hidden_in(vars(), &passed),
            ["ANTHROPIC_API_KEY"].map(OsString::from)
        );
    }

    #[test]
    fn a_log_record_is_written_redacted() {
        protect("sk-log-test-98765");
        let log = RedactedLog::new(Vec::new());
        {
            let mut record = log.record();
            // Written in pieces that split the key: the record is redacted whole.
            record.write_all(b"error: bad key sk-log-").unwrap();
            record.write_all(b"test-98765 given\n").unwrap();
        }
        let written = log.inner.into_inner().unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            "error: bad key [redacted] given\n"
        );
    }
}
