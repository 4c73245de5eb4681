//! `:Agent build` in a real Neovim against a release server on 127.0.0.1: a good binary is
//! installed with its record and :checkhealth says so; a wrong checksum, a missing asset and no
//! network install nothing and say what to do; cargo is used when asked for or when the release
//! has no binary (a fake `cargo` on PATH stands in for a real build).
//!
//! Each test runs the plugin from a copy of lua/ and plugin/ in a temporary directory, so the
//! binary lands in that copy's bin/, never in this checkout's.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use rmpv::Value;
use serde_json::Value as Json;

use crate::support::nvim::{Nvim, Options};

/// Serves the files under `root` over HTTP/1.0 on 127.0.0.1 (GET only; 404 for anything else).
/// Returns the base URL; the server thread lives until the test process ends.
fn serve(root: &Path) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || answer(stream, &root));
        }
    });
    url
}

fn answer(mut stream: TcpStream, root: &Path) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // Skip the headers.
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let file = (!path.contains(".."))
        .then(|| root.join(path.trim_start_matches('/')))
        .filter(|p| p.is_file());
    let _ = match file.and_then(|p| std::fs::read(p).ok()) {
        Some(body) => stream
            .write_all(
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .and_then(|()| stream.write_all(&body)),
        None => stream.write_all(
            b"HTTP/1.0 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found",
        ),
    };
}

/// A URL nothing listens on: a port that was just free.
fn closed_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A copy of the plugin (lua/, plugin/, build.lua) to install into.
fn plugin_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_dir(&root.join("lua"), &dir.path().join("lua"));
    copy_dir(&root.join("plugin"), &dir.path().join("plugin"));
    std::fs::copy(root.join("build.lua"), dir.path().join("build.lua")).unwrap();
    dir
}

/// This machine's PATH without the directories that hold a `cargo`, with `extra` first.
fn path_without_cargo(extra: Option<&Path>) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = extra
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::env::split_paths(&path).filter(|d| !d.join("cargo").exists()));
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fake backend: answers `--version` like the real one.
fn fake_backend() -> String {
    format!(
        "#!/bin/sh\necho \"agent-nvim {}\"\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A directory with a fake `cargo` that records its arguments in `<dir>/cargo.log` and "builds"
/// target/release/agent-nvim in its working directory.
fn fake_cargo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cargo.log");
    let backend = fake_backend().replace('"', "\\\"");
    write_executable(
        &dir.path().join("cargo"),
        &format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nmkdir -p target/release\nprintf '%s' \"{backend}\" > target/release/agent-nvim\nchmod +x target/release/agent-nvim\n",
            log.display()
        ),
    );
    dir
}

struct Setup {
    nvim: Nvim,
    plugin: tempfile::TempDir,
}

async fn start(release_url: &str, path: String) -> Setup {
    let plugin = plugin_copy();
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![
            ("AGENT_NVIM_RELEASE_URL".into(), release_url.into()),
            ("PATH".into(), path),
        ],
        setup: format!(
            "vim.opt.runtimepath:prepend({:?})",
            plugin.path().display().to_string()
        ),
    })
    .await;
    Setup { nvim, plugin }
}

impl Setup {
    /// Runs `:Agent {args}` and waits for its outcome: (ok, message).
    async fn build(&self, args: &str) -> (bool, String) {
        self.nvim
            .lua("require('agent.install').last = nil", vec![])
            .await;
        self.nvim.cmd(&format!("Agent {args}")).await;
        self.nvim
            .wait_for("require('agent.install').last ~= nil")
            .await;
        let last = self
            .nvim
            .lua(
                "local l = require('agent.install').last return { l.ok, l.message }",
                vec![],
            )
            .await;
        let last = last.as_array().unwrap();
        (
            last[0].as_bool().unwrap(),
            last[1].as_str().unwrap().to_string(),
        )
    }

    /// Runs `:Agent {args}`, which must fail, say each of `needles` and leave bin/ empty.
    async fn build_fails(&self, args: &str, needles: &[&str]) -> String {
        let (ok, message) = self.build(args).await;
        assert!(!ok, "{message}");
        for needle in needles {
            assert!(message.contains(needle), "no {needle:?} in: {message}");
        }
        assert!(self.bin_files().is_empty(), "{:?}", self.bin_files());
        message
    }

    fn bin_dir(&self) -> PathBuf {
        self.plugin.path().join("bin")
    }

    /// The files in bin/ (no temporary file may be left behind).
    fn bin_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.bin_dir())
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn record(&self) -> Json {
        let text = std::fs::read_to_string(self.bin_dir().join("agent-nvim.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// The asset name the plugin asks for on this machine.
    async fn asset(&self) -> String {
        self.nvim
            .lua(
                "local i = require('agent.install') return i.asset((i.target()))",
                vec![],
            )
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn checkhealth(&self) -> String {
        self.nvim.cmd("checkhealth agent").await;
        self.nvim
            .lua(
                "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
                vec![],
            )
            .await
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// A release directory holding `binary` as this machine's asset and `sum` as its `.sha256`.
fn release(asset: &str, binary: &str, sum: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let version_dir = dir.path().join(format!("v{}", env!("CARGO_PKG_VERSION")));
    std::fs::create_dir_all(&version_dir).unwrap();
    std::fs::write(version_dir.join(asset), binary).unwrap();
    std::fs::write(
        version_dir.join(format!("{asset}.sha256")),
        format!("{sum}  {asset}\n"),
    )
    .unwrap();
    dir
}

/// Starts Neovim against a release server holding `binary` as this machine's asset with the
/// sha256 `sum` (the asset's name depends on the machine, so a first Neovim asks the plugin).
/// Keep the returned directory alive as long as the server must serve it.
async fn start_with_release(binary: &str, sum: &str, path: String) -> (Setup, tempfile::TempDir) {
    let probe = start(&closed_url(), path_without_cargo(None)).await;
    let asset = probe.asset().await;
    let files = release(&asset, binary, sum);
    (start(&serve(files.path()), path).await, files)
}

fn sha256_hex(text: &str) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[tokio::test]
async fn the_plugins_version_is_cargos() {
    let setup = start(&closed_url(), path_without_cargo(None)).await;
    let version = setup
        .nvim
        .lua("return require('agent.install').VERSION", vec![])
        .await;
    assert_eq!(version, Value::from(env!("CARGO_PKG_VERSION")));
}

#[tokio::test]
async fn a_release_binary_is_downloaded_checked_installed_and_reported_by_checkhealth() {
    let binary = fake_backend();
    let (setup, _files) =
        start_with_release(&binary, &sha256_hex(&binary), path_without_cargo(None)).await;
    let asset = setup.asset().await;

    let (ok, message) = setup.build("build").await;
    assert!(ok, "{message}");
    assert!(message.starts_with("agent: installed"), "{message}");
    assert_eq!(setup.bin_files(), ["agent-nvim", "agent-nvim.json"]);
    let installed = setup.bin_dir().join("agent-nvim");
    assert_eq!(std::fs::read_to_string(&installed).unwrap(), binary);
    let record = setup.record();
    assert_eq!(record["method"], "download", "{record}");
    assert_eq!(record["version"], env!("CARGO_PKG_VERSION"), "{record}");
    assert!(
        record["url"].as_str().unwrap().ends_with(&asset),
        "{record}"
    );

    // The plugin now runs that binary, and :checkhealth says where it came from.
    let backend = setup
        .nvim
        .lua("return (require('agent.rpc').backend())", vec![])
        .await;
    assert_eq!(backend.as_str(), installed.to_str());
    let health = setup.checkhealth().await;
    assert!(
        health.contains(&format!("downloaded v{} for", env!("CARGO_PKG_VERSION"))),
        "{health}"
    );
    assert!(health.contains("is the plugin's"), "{health}");
}

#[tokio::test]
async fn checkhealth_warns_when_the_installed_binary_is_another_version() {
    let setup = start(&closed_url(), path_without_cargo(None)).await;
    write_executable(
        &setup.bin_dir().join("agent-nvim"),
        "#!/bin/sh\necho 'agent-nvim 0.0.1'\n",
    );
    let health = setup.checkhealth().await;
    assert!(
        health.contains(&format!(
            "the backend's version is 0.0.1, the plugin's {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{health}"
    );
    assert!(health.contains("no install record"), "{health}");
}

#[tokio::test]
async fn a_wrong_checksum_installs_nothing_and_says_so() {
    let cargo = fake_cargo();
    let (setup, _files) = start_with_release(
        &fake_backend(),
        &sha256_hex("something else"),
        path_without_cargo(Some(cargo.path())),
    )
    .await;

    setup
        .build_fails(
            "build",
            &["checksum", "nothing was installed", "cargo build --release"],
        )
        .await;
    // A tampered download is an error, not a reason to build something else.
    assert!(!cargo.path().join("cargo.log").exists());
}

#[tokio::test]
async fn a_missing_asset_without_cargo_says_how_to_build_by_hand() {
    let empty = tempfile::tempdir().unwrap();
    let setup = start(&serve(empty.path()), path_without_cargo(None)).await;

    let by_hand = format!(
        "`cargo build --release` in {}",
        setup.plugin.path().display()
    );
    setup
        .build_fails(
            "build",
            &["has no binary for", "404", "cargo is not on PATH", &by_hand],
        )
        .await;
}

#[tokio::test]
async fn a_missing_asset_falls_back_to_cargo_when_it_is_on_path() {
    let empty = tempfile::tempdir().unwrap();
    let cargo = fake_cargo();
    let setup = start(&serve(empty.path()), path_without_cargo(Some(cargo.path()))).await;

    let (ok, message) = setup.build("build").await;
    assert!(ok, "{message}");
    assert!(message.contains("has no binary for"), "{message}");
    assert!(message.contains("built agent-nvim"), "{message}");
    assert_eq!(
        std::fs::read_to_string(cargo.path().join("cargo.log")).unwrap(),
        "build --release\n"
    );
    assert_eq!(setup.bin_files(), ["agent-nvim", "agent-nvim.json"]);
    assert_eq!(setup.record()["method"], "cargo");
    let health = setup.checkhealth().await;
    assert!(
        health.contains(&format!("built v{} with cargo", env!("CARGO_PKG_VERSION"))),
        "{health}"
    );
}

#[tokio::test]
async fn agent_build_cargo_builds_even_when_a_release_exists() {
    let binary = fake_backend();
    let cargo = fake_cargo();
    let (setup, _files) = start_with_release(
        &binary,
        &sha256_hex(&binary),
        path_without_cargo(Some(cargo.path())),
    )
    .await;

    let (ok, message) = setup.build("build cargo").await;
    assert!(ok, "{message}");
    assert!(cargo.path().join("cargo.log").exists());
    assert_eq!(setup.record()["method"], "cargo");
}

#[tokio::test]
async fn without_network_nothing_is_installed_and_cargo_is_not_tried() {
    let cargo = fake_cargo();
    let setup = start(&closed_url(), path_without_cargo(Some(cargo.path()))).await;

    setup
        .build_fails(
            "build",
            &[
                "could not download",
                "check the network",
                "cargo build --release",
            ],
        )
        .await;
    assert!(!cargo.path().join("cargo.log").exists());
}

#[tokio::test]
async fn without_curl_the_message_says_to_install_it() {
    // A PATH holding only a checksum tool: no curl, no cargo.
    let tools = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/usr/bin/sha256sum", tools.path().join("sha256sum")).ok();
    let setup = start(&closed_url(), tools.path().display().to_string()).await;

    setup
        .build_fails("build download", &["curl is not on PATH"])
        .await;
}

#[tokio::test]
async fn build_lua_waits_for_the_install_before_returning() {
    let binary = fake_backend();
    let (setup, _files) =
        start_with_release(&binary, &sha256_hex(&binary), path_without_cargo(None)).await;

    // As lazy.nvim runs it: the file, loaded and called, with the plugin not on the runtimepath
    // yet; when it returns, the binary is in that plugin's bin/.
    let build_lua = setup.plugin.path().join("build.lua");
    setup
        .nvim
        .lua(
            "vim.opt.runtimepath:remove(...) assert(loadfile(select(2, ...)))()",
            vec![
                Value::from(setup.plugin.path().to_str().unwrap()),
                Value::from(build_lua.to_str().unwrap()),
            ],
        )
        .await;
    assert_eq!(setup.bin_files(), ["agent-nvim", "agent-nvim.json"]);
}

#[test]
fn the_release_workflow_builds_every_target_the_plugin_downloads_under_its_name() {
    let workflow = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".github/workflows/release.yml"),
    )
    .unwrap();
    // The targets lua/agent/install.lua's M.target() names.
    for target in [
        "x86_64-unknown-linux-musl",
        "aarch64-unknown-linux-musl",
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
    ] {
        assert!(workflow.contains(&format!("target: {target},")), "{target}");
    }
    // M.asset(): agent-nvim-<version>-<target>, and its .sha256 beside it.
    assert!(workflow.contains(r#"asset="agent-nvim-${VERSION}-${{ matrix.target }}""#));
    assert!(workflow.contains(r#"shasum -a 256 "$asset" > "$asset.sha256""#));
    // The tag is checked against the one version the plugin has.
    assert!(workflow.contains("lua/agent/install.lua"));
}

#[tokio::test]
async fn a_second_build_while_one_runs_is_refused_and_the_first_still_installs() {
    let binary = fake_backend();
    let (setup, _files) =
        start_with_release(&binary, &sha256_hex(&binary), path_without_cargo(None)).await;
    setup
        .nvim
        .lua(
            "_G.outcomes = {}
             local install = require('agent.install')
             for _ = 1, 2 do
               install.build({ on_done = function(ok, message) table.insert(_G.outcomes, { ok, message }) end })
             end",
            vec![],
        )
        .await;
    setup.nvim.wait_for("#_G.outcomes == 2").await;
    let outcomes = setup.nvim.lua("return _G.outcomes", vec![]).await;
    let outcomes: Vec<(bool, String)> = outcomes
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let o = o.as_array().unwrap();
            (o[0].as_bool().unwrap(), o[1].as_str().unwrap().to_string())
        })
        .collect();
    assert!(
        outcomes
            .iter()
            .any(|(ok, m)| !ok && m.contains("a build is already running")),
        "{outcomes:?}"
    );
    assert!(outcomes.iter().any(|(ok, _)| *ok), "{outcomes:?}");
    assert_eq!(setup.bin_files(), ["agent-nvim", "agent-nvim.json"]);
    assert_eq!(
        std::fs::read_to_string(setup.bin_dir().join("agent-nvim")).unwrap(),
        binary
    );
}

#[tokio::test]
async fn an_unknown_build_method_names_the_known_ones() {
    let setup = start(&closed_url(), path_without_cargo(None)).await;
    setup
        .build_fails(
            "build fast",
            &[
                "unknown build method",
                ":Agent build download",
                ":Agent build cargo",
            ],
        )
        .await;
}

#[tokio::test]
async fn an_unwritable_bin_directory_is_reported_and_nothing_is_fetched() {
    let binary = fake_backend();
    let (setup, _files) =
        start_with_release(&binary, &sha256_hex(&binary), path_without_cargo(None)).await;
    // A file where bin/ should be: mkdir fails (a read-only plugin directory would too, but the
    // tests may run as root).
    std::fs::write(setup.bin_dir(), "not a directory").unwrap();
    let (ok, message) = setup.build("build").await;
    assert!(!ok, "{message}");
    assert!(message.contains("cannot write to"), "{message}");
    assert!(message.contains("`backend` in setup()"), "{message}");
    assert_eq!(
        std::fs::read_to_string(setup.bin_dir()).unwrap(),
        "not a directory"
    );
}

/// A checkout with a downloaded binary and a newer hand build (scripts/dev.sh) runs the build,
/// and a newer download wins over an older build.
#[tokio::test]
async fn the_newer_of_the_installed_binary_and_a_hand_build_is_run() {
    let setup = start(&closed_url(), path_without_cargo(None)).await;
    let installed = setup.bin_dir().join("agent-nvim");
    let built = setup.plugin.path().join("target/release/agent-nvim");
    let backend = || async {
        setup
            .nvim
            .lua("return require('agent.rpc').backend()", vec![])
            .await
            .as_str()
            .unwrap()
            .to_string()
    };
    let set_mtime = |path: &Path, secs: i64| {
        let time = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: secs,
                tv_nsec: 0,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: secs,
                tv_nsec: 0,
            },
        };
        rustix::fs::utimensat(rustix::fs::CWD, path, &time, rustix::fs::AtFlags::empty()).unwrap();
    };
    write_executable(&installed, &fake_backend());
    write_executable(&built, &fake_backend());
    set_mtime(&installed, 1_000_000);
    set_mtime(&built, 2_000_000);
    assert_eq!(backend().await, built.display().to_string());
    set_mtime(&installed, 3_000_000);
    assert_eq!(backend().await, installed.display().to_string());
}
