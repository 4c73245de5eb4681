//! Inline edit benchmark (issue 34): a 2,000-line buffer, one edit_file of it with 50 hunks, in
//! a real Neovim (100x40 UI) driven by the real backend against the scripted model. Timed
//! inside Neovim: from the backend's asking for the buffer's text (the first thing the tool does
//! once the model's call has ended) to the proposal drawn (the redraw after it), then one hunk
//! kept and one dropped through their keys' callbacks (each with its redraw), and the last
//! step that applies 49 kept hunks. Run with `cargo bench --bench inline`; the figures go in
//! BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim::test_support::nvim::{Nvim, Options};
use rmpv::Value;
use serde_json::json;

const RUNS: usize = 7;
const LINES: usize = 2_000;
const HUNKS: usize = 50;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let before: String = (0..LINES)
        .map(|i| format!("    let value_{i} = compute({i}); // line {i}\n"))
        .collect();
    let every = LINES / HUNKS;
    let after: String = before
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i % every == every / 2 {
                format!("{l} // changed\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let mut replies = Vec::new();
    for _ in 0..RUNS {
        replies.push(Reply::Turn {
            parts: vec![Part::ToolCall {
                id: "t1".into(),
                name: "edit_file".into(),
                args: json!({"path": "big.rs", "old_str": before, "new_str": after}).to_string(),
            }],
            usage: (10, 5),
        });
        replies.push(Reply::Turn {
            parts: vec![Part::Text("Done.".into())],
            usage: (10, 5),
        });
    }
    let mock = MockLlm::start(Wire::Anthropic, replies);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (drawn, backend, keep, drop, apply, redraw, keep_lua, drop_lua) = runtime.block_on(async {
        let nvim = Nvim::start(Options {
            ui: Some((100, 40)),
            env: vec![
                ("ANTHROPIC_API_KEY".into(), "k".into()),
                ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
            ],
            setup: format!(
                "require('agent').setup({{ backend = '{}', provider = 'anthropic' }})",
                env!("CARGO_BIN_EXE_agent-nvim")
            ),
        })
        .await;
        nvim.write("big.rs", &before);
        // The clock starts when the backend asks for the text, and stops after the redraw that
        // follows the proposal's drawing.
        nvim.lua(
            "local inline = require('agent.inline')
             local text, on_event = inline.text, inline.on_event
             inline.text = function(...) vim.g.bench_asked = vim.uv.hrtime() return text(...) end
             inline.on_event = function(event)
               local arrived = vim.uv.hrtime()
               on_event(event)
               if event.type == 'inline_proposal' then
                 vim.cmd.redraw()
                 vim.g.bench_backend = (arrived - vim.g.bench_asked) / 1e6
                 vim.g.bench_drawn = (vim.uv.hrtime() - vim.g.bench_asked) / 1e6
               end
             end",
            vec![],
        )
        .await;
        let (mut drawn, mut keep, mut drop, mut apply) = (vec![], vec![], vec![], vec![]);
        let (mut backend, mut redraw) = (vec![], vec![]);
        let (mut keep_lua, mut drop_lua) = (vec![], vec![]);
        for _ in 0..RUNS {
            nvim.cmd("edit! big.rs").await;
            nvim.lua("vim.g.bench_drawn = nil", vec![]).await;
            nvim.cmd(&format!("1,{LINES}Agent edit mark the changed lines"))
                .await;
            nvim.wait_for("vim.g.bench_drawn ~= nil").await;
            drawn.push(nvim.lua("return vim.g.bench_drawn", vec![]).await.as_f64().unwrap());
            backend.push(nvim.lua("return vim.g.bench_backend", vec![]).await.as_f64().unwrap());
            // Each key's own callback, at the hunk under the cursor, with the redraw it causes.
            let timed = |key: &str, line: usize| {
                format!(
                    "vim.api.nvim_win_set_cursor(0, {{ {line}, 0 }})
                     vim.cmd.redraw()
                     local map = vim.fn.maparg('{key}', 'n', false, true)
                     local t = vim.uv.hrtime()
                     map.callback()
                     local lua = (vim.uv.hrtime() - t) / 1e6
                     vim.cmd.redraw()
                     return {{ (vim.uv.hrtime() - t) / 1e6, lua }}"
                )
            };
            let both = |v: Value| -> (f64, f64) {
                let a = v.as_array().unwrap();
                (a[0].as_f64().unwrap(), a[1].as_f64().unwrap())
            };
            // What a whole redraw of the screen alone costs with the proposal on it, for scale.
            redraw.push(
                nvim.lua(
                    "local t = vim.uv.hrtime() vim.cmd('redraw!') return (vim.uv.hrtime() - t) / 1e6",
                    vec![],
                )
                .await
                .as_f64()
                .unwrap(),
            );
            let first = every / 2 + 1;
            let (k, k_lua) = both(nvim.lua(&timed("ga", first), vec![]).await);
            let (d, d_lua) = both(nvim.lua(&timed("gs", first + every), vec![]).await);
            keep.push(k);
            keep_lua.push(k_lua);
            drop.push(d);
            drop_lua.push(d_lua);
            apply.push(both(nvim.lua(&timed("gA", first), vec![]).await).0);
            let kept = nvim
                .lua(
                    "return vim.tbl_count(vim.tbl_filter(function(l) return l:find('// changed', 1, true) end, vim.api.nvim_buf_get_lines(0, 0, -1, false)))",
                    vec![],
                )
                .await;
            assert_eq!(kept, Value::from(HUNKS - 1), "49 hunks kept, one dropped");
            nvim.wait_for("require('agent.inline').running() == 0").await;
        }
        (
            median(drawn),
            median(backend),
            median(keep),
            median(drop),
            median(apply),
            median(redraw),
            median(keep_lua),
            median(drop_lua),
        )
    });
    println!(
        "inline proposal of a {LINES}-line buffer with {HUNKS} hunks: drawn {drawn:.2} ms after the text was asked for (target < 30 ms; {backend:.2} ms of it before the proposal reached Lua); keep one hunk {keep:.2} ms ({keep_lua:.2} ms before the redraw), drop one {drop:.2} ms ({drop_lua:.2} ms before the redraw) (target < 5 ms); keep the other 48 and apply 49: {apply:.2} ms; a whole redraw (redraw!) alone: {redraw:.2} ms (median of {RUNS})"
    );
}
