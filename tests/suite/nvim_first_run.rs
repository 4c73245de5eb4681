//! A new user's first hour with the provider, in a real Neovim against
//! the mock model server: the first line of a new conversation, the key from a command, errors
//! that say the next step, a failed prompt kept, `:checkhealth agent` naming what is in use, and
//! `:Agent model` offering the provider's models.

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};

const CHAT: &str = "agent: chat";

fn answer(s: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(s.into())],
        usage: (10, 2),
    }
}

fn status(code: u16, message: &str) -> Reply {
    Reply::Status {
        code,
        message: message.into(),
        retry_after: None,
    }
}

/// Neovim at 140x40 whose plugin talks to `mock` as Anthropic, with the key `key` in
/// ANTHROPIC_API_KEY when given.
async fn start(mock: &MockLlm, key: Option<&str>, extra_setup: &str) -> Nvim {
    let mut env = vec![("ANTHROPIC_BASE_URL".into(), mock.base_url())];
    if let Some(key) = key {
        env.push(("ANTHROPIC_API_KEY".into(), key.into()));
    }
    Nvim::start(Options {
        ui: Some((140, 40)),
        env,
        setup: setup_lua(extra_setup),
    })
    .await
}

/// Types `prompt` into the input and sends it with <C-s>, as a person does.
async fn send_from_input(nvim: &Nvim, prompt: &str) {
    nvim.lua(
        "local w = require('agent.chat.window') \
         vim.api.nvim_buf_set_lines(w.input_buf, 0, -1, false, { ... }) \
         vim.api.nvim_set_current_win(vim.fn.bufwinid(w.input_buf))",
        vec![prompt.into()],
    )
    .await;
    nvim.api.input("<C-s>").await.unwrap();
}

async fn input_text(nvim: &Nvim) -> String {
    nvim.lua(
        "return table.concat(vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false), '\\n')",
        vec![],
    )
    .await
    .as_str()
    .unwrap()
    .to_string()
}

async fn wait_idle(nvim: &Nvim) {
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn a_new_conversation_says_its_provider_and_model_and_question_mark_for_keys() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("Hello.")]);
    let nvim = start(&mock, Some("sk-first-run-1"), "").await;
    nvim.cmd("Agent").await;
    let intro = "new conversation with anthropic · claude-sonnet-4-5 · ? for keys";
    nvim.wait_for_screen(intro).await;
    assert_eq!(nvim.buffer_lines(CHAT).await, vec![intro, ""]);
    // After a prompt, :Agent new starts another conversation, which says it again, once.
    send_from_input(&nvim, "hi").await;
    nvim.wait_for_line(CHAT, "Hello.").await;
    wait_idle(&nvim).await;
    nvim.cmd("Agent model claude-opus-4-5").await;
    nvim.cmd("Agent new here").await;
    nvim.wait_for_screen("new conversation with anthropic · claude-opus-4-5 · ? for keys")
        .await;
    assert_eq!(
        nvim.buffer_lines(CHAT).await,
        vec![
            "new conversation with anthropic · claude-opus-4-5 · ? for keys",
            ""
        ]
    );
}

#[tokio::test]
async fn with_no_key_the_first_line_names_the_variable_to_export_and_the_setup_keys() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, None, "").await;
    nvim.cmd("Agent").await;
    let said = "agent: no API key: ANTHROPIC_API_KEY is not set. Export it in the shell and \
                start Neovim again, or set api_key_cmd (a command that prints the key, such as \
                { \"pass\", \"show\", \"anthropic\" }) or api_key in setup() · ? for keys";
    let lines = nvim.wait_for_line(CHAT, "? for keys").await;
    assert_eq!(lines, vec![said, ""]);
    // A prompt is answered with the same advice.
    nvim.cmd("Agent hello").await;
    nvim.wait_for(
        "#vim.tbl_filter(function(l) return l:find('ANTHROPIC_API_KEY is not set. Export it', 1, true) end, \
         vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) == 2",
    )
    .await;
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test]
async fn api_key_cmd_gives_the_key_once_when_the_first_prompt_needs_it_and_never_shows_it() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("First."), answer("Second.")]);
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // The key the command prints is not in the command itself.
    let key = "sk-from-pass-nvim-2718";
    let setup = format!(
        "api_key_cmd = {{ 'sh', '-c', \"echo run >> '{}'; echo sk-from-pass-nvim-$((2700 + 18))\" }}",
        runs.display()
    );
    let nvim = start(&mock, None, &setup).await;
    nvim.cmd("Agent").await;
    nvim.wait_for_line(CHAT, "new conversation with anthropic")
        .await;
    // Not run at start: nothing has needed the key yet.
    assert!(!runs.exists(), "api_key_cmd ran before a prompt needed it");
    send_from_input(&nvim, "one").await;
    nvim.wait_for_line(CHAT, "First.").await;
    wait_idle(&nvim).await;
    send_from_input(&nvim, "two").await;
    nvim.wait_for_line(CHAT, "Second.").await;
    wait_idle(&nvim).await;
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\n");
    let keys: Vec<_> = mock
        .requests()
        .iter()
        .map(|r| r.header("x-api-key").map(String::from))
        .collect();
    assert_eq!(keys, vec![Some(key.to_string()), Some(key.to_string())]);
    let log_path = nvim
        .lua("return require('agent.rpc').logfile()", vec![])
        .await;
    let log = std::fs::read_to_string(log_path.as_str().unwrap()).unwrap();
    assert!(!log.contains(key), "the key is in the log");
    let health = nvim.checkhealth().await;
    assert!(!health.contains(key), "{health}");
    assert!(
        health.contains("the key is what api_key_cmd prints (sh -c"),
        "{health}"
    );
}

#[tokio::test]
async fn a_failing_api_key_cmd_says_what_to_do_and_keeps_the_prompt() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let setup = "api_key_cmd = { 'sh', '-c', 'echo gpg: decryption failed >&2; exit 2' }";
    let nvim = start(&mock, None, setup).await;
    nvim.cmd("Agent").await;
    send_from_input(&nvim, "explain the parser").await;
    nvim.wait_for_line(
        CHAT,
        "exited 2: gpg: decryption failed; fix the command in setup({ api_key_cmd = ... })",
    )
    .await;
    wait_idle(&nvim).await;
    assert_eq!(input_text(&nvim).await, "explain the parser");
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test]
async fn a_refused_key_names_the_variable_and_base_url_a_404_the_model_and_the_prompt_is_kept() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            status(401, "invalid x-api-key"),
            status(404, "model: claude-nope"),
            answer("Now it works."),
        ],
    );
    let base = mock.base_url();
    let nvim = start(&mock, Some("sk-wrong-key-31"), "").await;
    nvim.cmd("Agent").await;
    send_from_input(&nvim, "fix the build").await;
    let lines = nvim.wait_for_line(CHAT, "API error 401").await.join("\n");
    assert!(
        lines.contains(&format!(
            "; check the key, ANTHROPIC_API_KEY, and the base URL in use, {base} (base_url, else ANTHROPIC_BASE_URL)"
        )),
        "{lines}"
    );
    nvim.wait_for_line(
        CHAT,
        "your prompt is back in the input: <C-s> sends it again",
    )
    .await;
    wait_idle(&nvim).await;
    assert_eq!(input_text(&nvim).await, "fix the build");

    nvim.cmd("Agent model claude-nope").await;
    nvim.api.input("<C-s>").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "API error 404").await.join("\n");
    assert!(
        lines.contains(&format!(
            "; check the model, claude-nope (:Agent model picks another), and the URL, {base}/v1/messages"
        )),
        "{lines}"
    );
    wait_idle(&nvim).await;
    assert_eq!(input_text(&nvim).await, "fix the build");
    // Sent again as it was kept, it goes.
    nvim.cmd("Agent model claude-sonnet-4-5").await;
    nvim.lua(
        "vim.api.nvim_set_current_win(vim.fn.bufwinid(require('agent.chat.window').input_buf))",
        vec![],
    )
    .await;
    nvim.api.input("<C-s>").await.unwrap();
    nvim.wait_for_line(CHAT, "Now it works.").await;
    assert_eq!(input_text(&nvim).await, "");
}

#[tokio::test]
async fn checkhealth_names_the_provider_base_url_and_the_model_in_use_now_never_the_key() {
    let key = "sk-health-secret-4242";
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, Some(key), "").await;
    let health = nvim.checkhealth().await;
    assert!(
        health.contains("when the backend starts: provider anthropic, base URL (the environment's or the vendor's), model (the provider's default)"),
        "{health}"
    );
    nvim.cmd("Agent").await;
    nvim.wait_for_line(CHAT, "? for keys").await;
    nvim.cmd("Agent model claude-haiku-4-5").await;
    let health = nvim.checkhealth().await;
    assert!(
        health.contains(&format!(
            "provider anthropic, base URL {}, model claude-haiku-4-5",
            mock.base_url()
        )),
        "{health}"
    );
    assert!(health.contains("ANTHROPIC_API_KEY is set"), "{health}");
    assert!(!health.contains(key), "{health}");
}

/// What `:Agent model` offers, as vim.ui.select is given it.
async fn offered(nvim: &Nvim) -> Vec<String> {
    nvim.lua(
        "vim.ui.select = function(items) _G.offered = items end",
        vec![],
    )
    .await;
    nvim.cmd("Agent model").await;
    nvim.wait_for("_G.offered ~= nil").await;
    let items = nvim.lua("return _G.offered", vec![]).await;
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn agent_model_offers_the_providers_models_from_the_table_and_ollamas_own_list() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, Some("sk-models-1"), "").await;
    nvim.cmd("Agent").await;
    nvim.wait_for_line(CHAT, "? for keys").await;
    let models = offered(&nvim).await;
    for model in ["claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5"] {
        assert!(models.contains(&model.to_string()), "{models:?}");
    }
    assert!(!models.iter().any(|m| m.starts_with("gpt-")), "{models:?}");

    let ollama =
        MockLlm::start(Wire::Ollama, vec![]).with_models(&["qwen3-coder:30b", "llama3.2:latest"]);
    let nvim = Nvim::start(Options {
        ui: Some((140, 40)),
        env: vec![],
        setup: setup_lua(&format!(
            "provider = 'ollama', base_url = '{}'",
            ollama.base_url()
        )),
    })
    .await;
    nvim.cmd("Agent").await;
    nvim.wait_for_line(CHAT, "new conversation with ollama · qwen3-coder")
        .await;
    let models = offered(&nvim).await;
    assert!(
        models.contains(&"qwen3-coder:30b".to_string())
            && models.contains(&"llama3.2:latest".to_string()),
        "{models:?}"
    );
    assert!(
        ollama.requests().iter().any(|r| r.path == "/api/tags"),
        "the server was not asked"
    );
}

/// `max_cost`: the conversation stops before the request that would start past it, the chat
/// says what it has cost and the limit, and the prompt is back in the input, unsent.
#[tokio::test]
async fn max_cost_stops_the_conversation_and_keeps_the_prompt() {
    // Each answer: 10 in × $3000 + 2 out × $6000 a million = $0.042.
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("One."), answer("Two.")]);
    let nvim = start(
        &mock,
        Some("test-key"),
        "max_cost = 0.03, models = { ['claude-sonnet-4-5'] = { price = { input = 3000, output = 6000 } } }",
    )
    .await;
    nvim.cmd("Agent").await;
    send_from_input(&nvim, "first").await;
    nvim.wait_for_line(CHAT, "One.").await;
    wait_idle(&nvim).await;
    send_from_input(&nvim, "second").await;
    let lines = nvim
        .wait_for_line(
            CHAT,
            "agent: stopped before the next request: this conversation has cost $0.04 and its max_cost is $0.03; raise max_cost or start a new conversation",
        )
        .await;
    wait_idle(&nvim).await;
    assert_eq!(input_text(&nvim).await, "second");
    assert_eq!(mock.requests().len(), 1, "{lines:#?}");
    assert!(!lines.join("\n").contains("Two."), "{lines:#?}");
}
