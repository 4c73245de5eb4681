//! The log file: stdout is the msgpack channel, so logs go to a file, each record redacted and
//! kept on one line.

use std::path::Path;

/// Logs go to a file (stdout is the msgpack channel), each record redacted; without one, nowhere.
pub(super) fn init(path: Option<&Path>) {
    let Some(path) = path else {
        return;
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_NVIM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(LogWriter(crate::secrets::RedactedLog::new(OneLineLog(
            file,
        ))))
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
}

/// tracing's writer: a redacted record each time ([`crate::secrets::RedactedLog::record`]).
struct LogWriter<W>(crate::secrets::RedactedLog<W>);

impl<'a, W: std::io::Write + 'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter<W> {
    type Writer = crate::secrets::Record<'a, W>;

    fn make_writer(&'a self) -> Self::Writer {
        self.0.record()
    }
}

/// The log file, written one record per line with everything in it made visible
/// ([`crate::display::visible`]): a command, an agent's stderr or an API error quoted in a record
/// can neither forge a line of its own nor send escapes to the terminal `:Agent log` runs in.
/// [`crate::secrets::RedactedLog`] hands it each record whole, redacted.
struct OneLineLog<W>(W);

impl<W: std::io::Write> std::io::Write for OneLineLog<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use crate::display::{visible, Layout};
        let text = crate::text::lossy(buf);
        let (record, end) = match text.strip_suffix('\n') {
            Some(record) => (record, "\n"),
            None => (text.as_ref(), ""),
        };
        let line = visible(record, Layout::OneLine);
        self.0.write_all(line.as_bytes())?;
        self.0.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_log_record_stays_one_line_with_its_controls_visible() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.log");
        let log = LogWriter(crate::secrets::RedactedLog::new(OneLineLog(
            std::fs::File::create(&path).unwrap(),
        )));
        let mut record = tracing_subscriber::fmt::MakeWriter::make_writer(&log);
        record
            .write_all(b"INFO detail=touch PWNED #\r\x1b[2Kls\nINFO forged \xe2\x80\xae\n")
            .unwrap();
        drop(record);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "INFO detail=touch PWNED #\\r\\e[2Kls\\nINFO forged \\u{202e}\n"
        );
    }
}
