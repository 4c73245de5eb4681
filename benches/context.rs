//! `@` completion over 100,000 files: how soon the first results come.
//!
//! A workspace of 100,000 files in 1,000 directories (and 10,000 more under a directory its
//! `.gitignore` leaves out) is made in a temporary directory, then:
//! - the walk alone (`workspace::files::list`), cold for the index, warm for the page cache;
//! - a query over the kept listing (`best_matches`, the fuzzy match and ranking of 50);
//! - what a person waits for: in a real Neovim with the plugin and the release backend, from
//!   typing `@` and a query to the completion items being in Lua (`agent.context.complete`:
//!   the `files` request, its answer decoded), timed inside Neovim with `vim.uv.hrtime()`, the
//!   first query as soon as the backend has started (it is still walking: the answer is from
//!   the files found so far), then, once listed, a path typed a character at a time and 200
//!   queries that do not extend each other (each a full match over the 100,000).
//!
//! `cargo bench --locked --bench context`; the figures go in BENCHMARKS.md. Not a test: the
//! machines are shared, so a person reads the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use agent_nvim::test_support::nvim::{setup_lua_for, Nvim, Options};
use agent_nvim::workspace::files::{best_matches, list};
use rmpv::Value;

const FILES: usize = 100_000;
const QUERIES: [&str; 8] = [
    "calc", "mod42", "src/util", "lib.rs", "d7/f13", "test", "zz", "readme",
];

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let names = ["lib.rs", "calc.py", "util.ts", "test_main.go", "README.md"];
    for d in 0..1_000 {
        let sub = root.join(format!("src/pkg{}/d{d}", d % 37));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..FILES / 1_000 {
            std::fs::write(sub.join(format!("f{f}_{}", names[f % names.len()])), "").unwrap();
        }
    }
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    for d in 0..100 {
        let sub = root.join(format!("target/debug/d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("o{f}.o")), "").unwrap();
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    let mut walks: Vec<Duration> = (0..5)
        .map(|_| {
            let at = Instant::now();
            let files = list(&root);
            let took = at.elapsed();
            assert_eq!(files.len(), FILES + 1, "the ignored directory is left out");
            took
        })
        .collect();
    walks.sort();
    println!(
        "listing {FILES} files (+10,000 ignored): median {:.1} ms, min {:.1} ms, max {:.1} ms (5 walks)",
        ms(walks[2]),
        ms(walks[0]),
        ms(walks[4])
    );

    let files = list(&root);
    let mut queries: Vec<Duration> = (0..400)
        .map(|i| {
            let at = Instant::now();
            let found = best_matches(&files, QUERIES[i % QUERIES.len()], 50);
            let took = at.elapsed();
            std::hint::black_box(found);
            took
        })
        .collect();
    queries.sort();
    println!(
        "fuzzy query over the listing, best 50: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (400 queries)",
        ms(queries[200]),
        ms(queries[396]),
        ms(queries[399])
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(in_neovim(dir));
}

/// Times `agent.context.complete` in Neovim: the first query right after the backend started,
/// then warm ones.
async fn in_neovim(workspace: tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let nvim = Nvim::start_in(
        Options {
            ui: Some((120, 40)),
            env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
            setup: setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), ""),
        },
        workspace,
        home,
    )
    .await;
    // From asking to the items in Lua; Neovim is free meanwhile (`files` is a notification),
    // so the wait is vim.wait's, here only.
    let timed = "local query = ... \
        local t, got = vim.uv.hrtime(), nil \
        require('agent.context').complete('@' .. query, true, function(found) \
          got = { (vim.uv.hrtime() - t) / 1e6, #found.items } end) \
        vim.wait(10000, function() return got ~= nil end, 1) \
        return got";
    nvim.lua(
        "require('agent').open() vim.wait(10000, function() \
           return require('agent.rpc').info() ~= nil end, 5)",
        vec![],
    )
    .await;
    let first = nvim.lua(timed, vec![Value::from("calc")]).await;
    // Then once the first listing is done (the backend walks it when it starts).
    nvim.lua(
        "local listed = false \
         local function ask() require('agent.rpc').files('', 1, function(f) \
           if f and not f.partial then listed = true else vim.defer_fn(ask, 20) end end) end \
         ask() vim.wait(20000, function() return listed end, 20)",
        vec![],
    )
    .await;
    // Typing a path a character at a time: each query extends the last one.
    let typed = "pkg3/d42/f7calc";
    let mut keystrokes: Vec<f64> = Vec::new();
    for end in 1..=typed.len() {
        let got = nvim.lua(timed, vec![Value::from(&typed[..end])]).await;
        keystrokes.push(got.as_array().unwrap()[0].as_f64().unwrap());
    }
    let slowest = keystrokes.iter().copied().fold(0.0, f64::max);
    println!(
        "in Neovim, typing `@{typed}` a character at a time: slowest keystroke {slowest:.1} ms, the last {:.1} ms (each: {keystrokes:.1?})",
        keystrokes[keystrokes.len() - 1]
    );
    let mut warm: Vec<f64> = Vec::new();
    for i in 0..200 {
        let got = nvim
            .lua(timed, vec![Value::from(QUERIES[i % QUERIES.len()])])
            .await;
        warm.push(got.as_array().unwrap()[0].as_f64().unwrap());
    }
    warm.sort_by(f64::total_cmp);
    let first = first.as_array().unwrap();
    println!(
        "in Neovim, `@calc` to its items in Lua: first (backend just started, partial) {:.1} ms ({} items); listed, one of 8 queries that do not extend each other: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (200 queries)",
        first[0].as_f64().unwrap(),
        first[1].as_u64().unwrap(),
        warm[100],
        warm[198],
        warm[199]
    );
}
