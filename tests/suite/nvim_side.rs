//! Side questions (`:Agent btw`, `/btw`) in a real Neovim against the scripted model: asked with
//! the conversation's context, answered in a float, and never part of the conversation.

use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};

const CHAT: &str = "agent: chat";

fn done(text: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(text.into())],
        usage: (10, 5),
    }
}

#[tokio::test]
async fn a_side_question_is_answered_in_a_float_with_the_context_and_leaves_no_trace() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            done("The answer is in calc.py."),
            done("It was about the **area** function."),
            done("Next answer."),
        ],
    );
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(""),
    })
    .await;
    nvim.cmd("Agent where is the answer?").await;
    nvim.wait_for_line(CHAT, "The answer is in calc.py.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let turn_cost = nvim
        .lua("return require('agent.chat.status').cost()", vec![])
        .await
        .as_f64()
        .unwrap();
    // Typed in the input, as a person would.
    nvim.lua(
        "local b = vim.fn.bufnr('agent: input') \
         vim.api.nvim_buf_set_lines(b, 0, -1, false, { '/btw what was that about?' }) \
         vim.api.nvim_set_current_win(vim.fn.bufwinid(b)) vim.cmd.stopinsert()",
        vec![],
    )
    .await;
    nvim.api.input("<C-s>").await.unwrap();
    let screen = nvim
        .wait_for_screen("It was about the **area** function.")
        .await;
    assert!(
        screen.contains("a side question · not added to the conversation"),
        "{screen}"
    );
    let screen = nvim
        .wait_for_screen("y puts it in the input · q closes")
        .await;
    assert!(screen.contains("what was that about?"), "{screen}");
    // Its cost is the conversation's too: the same usage as the turn, so twice the turn's.
    let spent = nvim
        .lua("return require('agent.chat.status').cost()", vec![])
        .await
        .as_f64()
        .unwrap();
    assert!(
        spent > 0.0 && (spent - 2.0 * turn_cost).abs() < 1e-12,
        "{spent} {turn_cost}"
    );
    // It was asked with the conversation before it, and the question after.
    let asked = mock.requests()[1].body["messages"].clone();
    let asked = asked.as_array().unwrap();
    assert_eq!(
        asked[0]["content"][0]["text"],
        json!("where is the answer?")
    );
    let question = asked.last().unwrap()["content"].to_string();
    assert!(
        question.contains("A side question, answered apart"),
        "{question}"
    );
    assert!(question.contains("what was that about?"), "{question}");
    // `y` puts the answer in the input, and the float closes.
    nvim.api.input("y").await.unwrap();
    nvim.wait_for("require('agent.side').current() == nil")
        .await;
    let input = nvim.buffer_lines("agent: input").await.join("\n");
    assert_eq!(input, "It was about the **area** function.");
    // Neither the chat nor the next request holds the side question or its answer.
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert!(!chat.contains("what was that about"), "{chat}");
    nvim.lua(
        "vim.api.nvim_buf_set_lines(vim.fn.bufnr('agent: input'), 0, -1, false, {})",
        vec![],
    )
    .await;
    nvim.cmd("Agent and next?").await;
    nvim.wait_for_line(CHAT, "Next answer.").await;
    let next = mock.requests()[2].body["messages"].to_string();
    assert!(!next.contains("what was that about"), "{next}");
    assert!(!next.contains("area"), "{next}");
    assert!(
        next.contains("where is the answer?") && next.contains("and next?"),
        "{next}"
    );
}

/// `max_cost` holds a side question to what the conversation has spent, and the side
/// question's cost counts against the conversation's next turn.
#[tokio::test]
async fn a_side_question_is_held_to_the_conversations_max_cost_and_counted_in_it() {
    // Each request: 10 in × $3000 + 5 out × $6000 a million = $0.06.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![done("First."), done("An aside."), done("never sent")],
    );
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(
            "max_cost = 0.1, models = { ['claude-sonnet-4-5'] = { price = { input = 3000, output = 6000 } } }",
        ),
    })
    .await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "First.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // $0.06 spent, under the limit: answered.
    nvim.cmd("Agent btw and?").await;
    nvim.wait_for_screen("An aside.").await;
    nvim.wait_for("(require('agent.side').current() or {}).done == true")
        .await;
    // $0.12 now: the conversation's next turn is refused, counting the side question...
    nvim.cmd("Agent second").await;
    nvim.wait_for_line(
        CHAT,
        "agent: stopped before the next request: this conversation has cost $0.12 and its max_cost is $0.10; raise max_cost or start a new conversation",
    )
    .await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // ...and so is another side question, with the same words.
    nvim.cmd("Agent btw again?").await;
    let screen = nvim
        .wait_for_screen("cost $0.12 and its max_cost is $0.10; raise max_cost")
        .await;
    assert!(
        screen.contains("the side question failed: stopped before the next request"),
        "{screen}"
    );
    assert!(screen.contains("again?"), "{screen}");
    assert_eq!(mock.requests().len(), 2, "nothing sent past the limit");
}

/// An external agent's conversation spends nothing of the built-in one it replaced: an inline
/// edit made in it is not refused for what the built-in conversation had cost.
#[tokio::test]
async fn an_external_agents_conversation_counts_inline_edits_from_nothing() {
    // Each request: $0.06, over the $0.05 limit once made.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![done("First."), done("Nothing to change.")],
    );
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(&format!(
            "max_cost = 0.05, models = {{ ['claude-sonnet-4-5'] = {{ price = {{ input = 3000, output = 6000 }} }} }}, \
             acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'normal' }} }} }} }}"
        )),
    })
    .await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "First.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.write("calc.py", "x = 1\n");
    nvim.cmd("edit calc.py").await;
    nvim.cmd("Agent edit make it two").await;
    nvim.wait_for("require('agent.inline').running() == 0")
        .await;
    assert_eq!(mock.requests().len(), 2, "the inline edit was sent");
    let messages = nvim.messages().await;
    assert!(messages.contains("Nothing to change."), "{messages}");
}
