//! Where the provider's key comes from: a value in hand (the provider's environment variable, or
//! `api_key` in setup()) or a command that prints it (`api_key_cmd`, such as `pass show
//! anthropic`). The command runs in the backend, once, when the first request needs the key: a
//! session that never asks the model (an external agent's) never runs it, and the key never
//! crosses the RPC channel, reaches Lua, a log, an error text or a child's environment (it is
//! added to the redactor the moment it is read, see [`crate::secrets`]).

use std::fmt;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// An API key. Its Debug and Display never show the value, so it cannot leak into a log.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: String) -> Self {
        ApiKey(key)
    }

    /// The value, for the one header that carries it.
    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// How a provider's key is had.
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    /// The provider takes none (Ollama).
    None,
    /// A key in hand; `from` names where, as the errors that ask to check it say it
    /// (`ANTHROPIC_API_KEY`, `api_key in setup()`).
    Given { key: ApiKey, from: String },
    /// `api_key_cmd`: the command (program and arguments) that prints the key.
    Command(Vec<String>),
}

impl Key {
    /// Where the key comes from, as the person would look for it; None without a key.
    pub fn source(&self) -> Option<String> {
        match self {
            Key::None => None,
            Key::Given { from, .. } => Some(from.clone()),
            Key::Command(argv) => Some(format!("api_key_cmd ({})", argv.join(" "))),
        }
    }
}

/// Why `api_key_cmd` gave no key: the command, what went wrong, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "api_key_cmd ({command}) {why}; fix the command in setup({{ api_key_cmd = ... }}) so that it prints the key{}",
    var.as_deref().map(|var| format!(", or remove api_key_cmd and export {var} before starting Neovim")).unwrap_or_default()
)]
pub struct KeyCommandError {
    /// The command as configured, its words joined.
    pub command: String,
    /// What went wrong (it did not start, exited, printed nothing).
    pub why: String,
    /// The provider's key variable, which works instead.
    pub var: Option<String>,
}

/// How long `api_key_cmd` may take: long enough to type a passphrase into a pinentry.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The key `argv` prints on stdout: its first line that is not blank, trimmed (`pass show`
/// prints other fields after the password). Nothing it prints is logged; its
/// stderr's last line says why it failed. Errors are what the person reads after `agent: `,
/// saying what to do.
pub async fn run_command(argv: &[String], var: Option<&str>) -> Result<ApiKey, KeyCommandError> {
    let fail = |why: String| KeyCommandError {
        command: argv.join(" "),
        why,
        var: var.map(str::to_string),
    };
    let Some((program, args)) = argv.split_first() else {
        return Err(fail("is empty".into()));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| fail(format!("could not start: {err}")))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let read = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let out_read = async {
            if let Some(pipe) = stdout.as_mut() {
                let _ = pipe.take(1 << 16).read_to_end(&mut out).await;
            }
        };
        let err_read = async {
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.take(1 << 16).read_to_end(&mut err).await;
            }
        };
        tokio::join!(out_read, err_read);
        let status = child.wait().await;
        (status, out, err)
    };
    let (status, out, err) = tokio::time::timeout(COMMAND_TIMEOUT, read)
        .await
        .map_err(|_| {
            fail(format!(
                "did not finish within {}s",
                COMMAND_TIMEOUT.as_secs()
            ))
        })?;
    let status = status.map_err(|err| fail(format!("could not be waited for: {err}")))?;
    let printed = String::from_utf8_lossy(&out);
    // Protected at once, every line: whatever happens next, none leaves the process.
    for line in printed.lines() {
        crate::secrets::protect(line);
    }
    // The first line, as `pass show` prints the password before any other field.
    let key = printed
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string();
    if !status.success() {
        let said = String::from_utf8_lossy(&err);
        let last = said.lines().rev().find(|l| !l.trim().is_empty());
        let code = status
            .code()
            .map_or_else(|| "was killed".to_string(), |c| format!("exited {c}"));
        let why = match last {
            Some(line) => {
                let line = crate::secrets::redact(line.trim());
                let line: String = line.chars().take(200).collect();
                format!("{code}: {line}")
            }
            None => code,
        };
        return Err(fail(why));
    }
    if key.is_empty() {
        return Err(fail("printed nothing".into()));
    }
    Ok(ApiKey::new(key))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[tokio::test]
    async fn the_command_s_output_is_the_key_trimmed_and_kept_secret() {
        let key = run_command(
            &argv(&[
                "sh",
                "-c",
                "printf '\\n  sk-from-command-1234 \\nlogin: me\\n'",
            ]),
            Some("ANTHROPIC_API_KEY"),
        )
        .await
        .unwrap();
        assert_eq!(key, ApiKey::new("sk-from-command-1234".into()));
        assert_eq!(
            crate::secrets::redact("a sk-from-command-1234 b"),
            "a [redacted] b"
        );
    }

    #[tokio::test]
    async fn a_failing_command_says_why_and_what_to_do_without_what_it_printed() {
        let err = run_command(
            &argv(&[
                "sh",
                "-c",
                "echo sk-$((6*7))-half-printed; echo 'Error: anthropic is not in the password store.' >&2; exit 1",
            ]),
            Some("ANTHROPIC_API_KEY"),
        )
        .await
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "api_key_cmd (sh -c echo sk-$((6*7))-half-printed; echo 'Error: anthropic is not in the password store.' >&2; exit 1) exited 1: Error: anthropic is not in the password store.; fix the command in setup({ api_key_cmd = ... }) so that it prints the key, or remove api_key_cmd and export ANTHROPIC_API_KEY before starting Neovim"
        );
        let err = run_command(&argv(&["/nonexistent/pass", "show"]), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("api_key_cmd (/nonexistent/pass show) could not start: "),
            "{err}"
        );
        let err = run_command(&argv(&["true"]), None)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(err, "api_key_cmd (true) printed nothing; fix the command in setup({ api_key_cmd = ... }) so that it prints the key");
    }
}
