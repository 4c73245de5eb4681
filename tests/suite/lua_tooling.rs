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
    for module in ["lua/agent/init.lua", "lua/agent/config.lua"] {
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
