//! Several conversations at once in one Neovim, one per tab page, served by the one backend:
//! each chat shows only its own conversation, one keeps running while another is shown, their
//! questions go into one queue named by conversation, and `:Agent list`, `statusline()`,
//! `:Agent name` and `:Agent close` see them all.

use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim, Options};

const FIRST: &str = "agent: chat";
const SECOND: &str = "agent: chat 2";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 2),
    }
}

fn text(s: &str) -> Reply {
    turn(vec![Part::Text(s.into())])
}

fn command(command: &str) -> Reply {
    turn(vec![Part::ToolCall {
        id: "t1".into(),
        name: "run_bash".into(),
        args: json!({ "command": command }).to_string(),
    }])
}

async fn start(mock: &MockLlm) -> Nvim {
    Nvim::start(Options {
        ui: Some((120, 40)),
        ..mock_options(mock, "")
    })
    .await
}

/// A workspace that is a git repository with one commit (`a.txt`), and its path.
fn repository() -> (tempfile::TempDir, std::path::PathBuf) {
    use agent_nvim_fixtures::user_repo::git;
    let workspace = tempfile::tempdir().unwrap();
    let main = workspace.path().canonicalize().unwrap();
    std::fs::write(main.join("a.txt"), "alpha\n").unwrap();
    git(&main, &["init", "-q"]);
    git(&main, &["add", "-A"]);
    git(&main, &["commit", "-q", "-m", "one"]);
    (workspace, main)
}

/// Goes to the waiting question, waits until it takes keys, and types `keys`.
async fn answer(nvim: &Nvim, keys: &str) {
    nvim.cmd("Agent approve").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input(keys).await.unwrap();
}

/// Each tab page's chat windows (their buffers' names), in order.
async fn tab_buffers(nvim: &Nvim) -> Vec<String> {
    let value = nvim
        .lua(
            "local names = {} \
             for _, tab in ipairs(vim.api.nvim_list_tabpages()) do \
               local wins = {} \
               for _, w in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do \
                 local name = vim.fn.bufname(vim.api.nvim_win_get_buf(w)) \
                 if vim.startswith(name, 'agent: ') then wins[#wins + 1] = name end \
               end \
               table.sort(wins) \
               names[#names + 1] = table.concat(wins, ',') \
             end \
             return names",
            vec![],
        )
        .await;
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn two_conversations_in_two_tabs_run_at_once_each_in_its_own_chat() {
    // Conversation 1 runs a command (its question waits); conversation 2 answers meanwhile;
    // then 1 goes on once allowed.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            command("echo fixed"),
            text("Docs written."),
            text("Tests fixed."),
        ],
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent fix the tests").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    // `:Agent new` in a tab page that shows one: another, in a new tab page.
    nvim.cmd("Agent new").await;
    assert_eq!(
        tab_buffers(&nvim).await,
        [
            "agent: chat,agent: input".to_string(),
            "agent: chat 2,agent: input 2".to_string()
        ]
    );
    // The question follows the person into the new tab page, named, beside what they type.
    nvim.wait_for_screen("[fix the tests] echo fixed").await;
    assert_eq!(
        nvim.lua(
            "return vim.api.nvim_win_get_tabpage(vim.fn.bufwinid('agent://approval')) \
             == vim.api.nvim_get_current_tabpage() and vim.fn.bufname('%')",
            vec![]
        )
        .await
        .as_str(),
        Some("agent: input 2")
    );
    // This conversation's model only.
    nvim.cmd("Agent model claude-opus-4-5").await;
    nvim.cmd("Agent write the docs").await;
    let second = nvim.wait_for_line(SECOND, "Docs written.").await;
    // Each chat shows its own conversation only.
    assert!(
        second.iter().any(|l| l == "write the docs")
            && !second.iter().any(|l| l.contains("fix the tests")),
        "{second:#?}"
    );
    let first = nvim.buffer_lines(FIRST).await;
    assert!(
        first.iter().any(|l| l == "fix the tests")
            && !first
                .iter()
                .any(|l| l.contains("Docs written") || l.contains("write the docs")),
        "{first:#?}"
    );
    // The statusline counts across them: 1 waits for approval (2 is idle).
    nvim.wait_for("require('agent').statusline() == 'agent: 1 waiting'")
        .await;
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(r) return require('agent.pickers').conversation_row(r) end, \
             require('agent').conversations())",
            vec![],
        )
        .await;
    let rows: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0] == "fix the tests · built-in · waiting for approval · just now · <$0.01",
        "{rows:?}"
    );
    assert!(
        rows[1] == "write the docs · built-in · idle · just now · <$0.01  (here)",
        "{rows:?}"
    );
    // :Agent list lists both, with what they cost in all; choosing the first goes to its tab
    // page, where its question names it. Answered there, it goes on, in its own chat.
    nvim.api.input("<Esc>:Agent list<CR>").await.unwrap();
    let list = nvim
        .wait_for_screen("2 conversations · <$0.01 in all")
        .await;
    assert!(
        list.contains("1: fix the tests · built-in · waiting for approval")
            && list.contains("2: write the docs · built-in · idle"),
        "{list}"
    );
    nvim.api.input("1<CR>").await.unwrap();
    nvim.wait_for("vim.fn.tabpagenr() == 1").await;
    nvim.wait_for_screen("[fix the tests] echo fixed").await;
    nvim.cmd("Agent approve").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("1").await.unwrap();
    let first = nvim.wait_for_line(FIRST, "Tests fixed.").await;
    assert!(
        !first.iter().any(|l| l.contains("Docs written")),
        "{first:#?}"
    );
    let second = nvim.buffer_lines(SECOND).await;
    assert!(
        !second.iter().any(|l| l.contains("Tests fixed")),
        "{second:#?}"
    );
    // Each prompt went out as its own conversation: the third request holds the first one's
    // history, not the second's.
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let models: Vec<&str> = requests
        .iter()
        .map(|r| r.body["model"].as_str().unwrap())
        .collect();
    assert_eq!(models[1], "claude-opus-4-5");
    assert!(
        models[0] == models[2] && models[0] != models[1],
        "{models:?}"
    );
    let second = requests[1].body.to_string();
    assert!(
        second.contains("write the docs")
            && !second.contains("fix the tests")
            && !second.contains("echo fixed"),
        "{second}"
    );
    let third = requests[2].body.to_string();
    assert!(
        third.contains("fix the tests")
            && third.contains("echo fixed")
            && !third.contains("write the docs")
            && !third.contains("Docs written"),
        "{third}"
    );
}

#[tokio::test]
async fn a_name_a_close_and_the_limit_on_open_conversations() {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("One."), text("Two.")]);
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        ..mock_options(&mock, "max_conversations = 2")
    })
    .await;
    nvim.cmd("Agent first prompt").await;
    nvim.wait_for_line(FIRST, "One.").await;
    nvim.cmd("Agent new").await;
    nvim.cmd("Agent second prompt").await;
    nvim.wait_for_line(SECOND, "Two.").await;
    // Past max_conversations: said, and nothing is made.
    let refused = nvim
        .lua(
            "local ok, err = pcall(vim.cmd, 'Agent new') return tostring(err)",
            vec![],
        )
        .await;
    assert!(
        refused.as_str().unwrap().contains(
            "agent: 2 conversations are open, the most `max_conversations` allows; close one with :Agent close"
        ),
        "{refused}"
    );
    assert_eq!(tab_buffers(&nvim).await.len(), 2);
    // :Agent name renames the current tab page's; with two open, the winbar says whose chat
    // it is, and the tab labels name both.
    nvim.cmd("Agent name docs").await;
    let screen = nvim.wait_for_screen("[docs] idle").await;
    let labels = screen.lines().next().unwrap();
    assert!(
        labels.contains(" 1 agent: first prompt ") && labels.contains(" 2 agent: docs"),
        "{labels}"
    );
    let names = nvim
        .lua(
            "return vim.tbl_map(function(r) return r.name end, require('agent').conversations())",
            vec![],
        )
        .await;
    assert_eq!(
        names,
        rmpv::Value::Array(vec!["first prompt".into(), "docs".into()])
    );
    // :Agent close ends the current tab page's: its chat and its tab page go, the other stays.
    nvim.cmd("Agent close").await;
    assert_eq!(
        tab_buffers(&nvim).await,
        ["agent: chat,agent: input".to_string()]
    );
    let left = nvim
        .lua("return #require('agent').conversations()", vec![])
        .await;
    assert_eq!(left.as_i64(), Some(1));
    // One left: Neovim's own tab labels again.
    assert_eq!(
        nvim.lua("return vim.o.tabline", vec![]).await.as_str(),
        Some("")
    );
    // One fewer open: a new one may be made again.
    nvim.cmd("Agent new").await;
    assert_eq!(tab_buffers(&nvim).await.len(), 2);
}

#[tokio::test]
async fn a_conversation_that_ends_while_another_is_shown_says_so_by_name() {
    // The first answer streams slowly: it ends while the second tab page is shown.
    let mock = MockLlm::start(Wire::Anthropic, vec![text("Slowly done.")]).with_pace(
        crate::support::mock_llm::Pace {
            chunk_bytes: Some(40),
            delay: std::time::Duration::from_millis(150),
        },
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent check the build please").await;
    nvim.cmd("Agent new").await;
    nvim.wait_for("vim.fn.tabpagenr() == 2").await;
    let first = nvim.wait_for_line(FIRST, "Slowly done.").await;
    assert!(
        first.iter().any(|l| l == "check the build please"),
        "{first:#?}"
    );
    // Unseen: the notice names the conversation and quotes its prompt.
    let mut messages = String::new();
    for _ in 0..100 {
        messages = nvim.messages().await;
        if messages.contains("agent: [check the build please] done · check the build please (") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no notice naming the conversation: {messages}");
}

#[tokio::test]
async fn agent_approvals_lists_every_conversations_question_and_answers_the_one_chosen_first() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            command("echo one"),
            command("echo two"),
            text("Two refused."),
            text("One ran."),
        ],
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent do one").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.cmd("Agent new").await;
    nvim.cmd("Agent do two").await;
    nvim.wait_for("require('agent.approval').pending() == 2")
        .await;
    // The first asked is shown first, named.
    nvim.wait_for_screen("[do one] echo one").await;
    nvim.api.input("<Esc>:Agent approvals<CR>").await.unwrap();
    let list = nvim
        .wait_for_screen("questions waiting for an answer")
        .await;
    assert!(
        list.contains("1: [do one] echo one") && list.contains("2: [do two] echo two"),
        "{list}"
    );
    nvim.api.input("2<CR>").await.unwrap();
    nvim.wait_for_screen("[do two] echo two").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(SECOND, "Two refused.").await;
    // The other question was only put back: it is shown again, and answered it goes on.
    nvim.wait_for_screen("[do one] echo one").await;
    nvim.cmd("Agent approve").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("1").await.unwrap();
    let first = nvim.wait_for_line(FIRST, "One ran.").await;
    assert!(
        first.iter().any(|l| l.contains("echo one -> exit 0")),
        "{first:#?}"
    );
    let second = nvim.buffer_lines(SECOND).await;
    assert!(
        second
            .iter()
            .any(|l| l.contains("echo two") && l.contains("refused")),
        "{second:#?}"
    );
}

#[tokio::test]
async fn a_question_from_a_conversation_not_shown_decides_nothing_while_the_person_types_in_another(
) {
    // Conversation 1's command comes while the person types in conversation 2's input.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![command("touch created_without_asking.txt"), text("OK.")],
    )
    .with_pace(crate::support::mock_llm::Pace {
        chunk_bytes: None,
        delay: std::time::Duration::from_millis(600),
    });
    let nvim = start(&mock).await;
    nvim.cmd("Agent make the file").await;
    nvim.cmd("Agent new").await;
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    // Every choice key, a key at a time for over a second, so the question arrives mid-sentence.
    let sentence = "yes 1 and 2 are fine, after 3 a question then 4 more; no regrets";
    let mut arrived_while_typing = false;
    for c in sentence.chars() {
        nvim.api.input(&c.to_string()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        arrived_while_typing |= nvim
            .lua("return require('agent.approval').pending() > 0", vec![])
            .await
            == rmpv::Value::from(true);
    }
    let screen = nvim.wait_for_screen("[make the file] touch").await;
    assert!(
        arrived_while_typing,
        "the question came after the typing: {screen}"
    );
    // Nothing decided: the person's text whole in the input they typed in, still typing there.
    assert_eq!(
        nvim.buffer_lines("agent: input 2").await,
        vec![sentence.to_string()]
    );
    let here = nvim
        .lua(
            "return { vim.fn.bufname('%'), vim.api.nvim_get_mode().mode, require('agent.approval').pending() }",
            vec![],
        )
        .await;
    assert_eq!(
        here,
        rmpv::Value::Array(vec!["agent: input 2".into(), "i".into(), 1.into()])
    );
    assert!(!nvim
        .workspace
        .path()
        .join("created_without_asking.txt")
        .exists());
    // The notice names the conversation that asks.
    let messages = nvim.messages().await;
    assert!(
        messages.contains("agent: [make the file] waiting for approval · make the file"),
        "{messages}"
    );
}

#[tokio::test]
async fn a_session_grant_given_in_one_conversation_is_not_given_in_another() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            command("echo same"),
            text("One done."),
            command("echo same"),
            text("Two refused."),
            command("echo same"),
            text("Granted still."),
        ],
    );
    let nvim = start(&mock).await;
    nvim.lua(
        "_G.asked = 0 vim.api.nvim_create_autocmd('User', { pattern = 'AgentApprovalRequest', \
         callback = function() _G.asked = _G.asked + 1 end })",
        vec![],
    )
    .await;
    // Conversation 1: `echo same` allowed for its session (a lasting grant: pressed twice).
    nvim.cmd("Agent run it").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    answer(&nvim, "22").await;
    nvim.wait_for_line(FIRST, "One done.").await;
    // Conversation 2 runs the very same command: it is asked, and refused.
    nvim.cmd("Agent new").await;
    nvim.cmd("Agent run it too").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.wait_for_screen("[run it too] echo same").await;
    answer(&nvim, "4").await;
    nvim.wait_for_line(SECOND, "Two refused.").await;
    // Conversation 1 still holds its grant: no question.
    nvim.lua("require('agent').show(1)", vec![]).await;
    nvim.cmd("Agent run it again").await;
    nvim.wait_for_line(FIRST, "Granted still.").await;
    assert_eq!(nvim.lua("return _G.asked", vec![]).await.as_i64(), Some(2));
}

/// This workspace's saved conversations as (title, id), the most recent first.
async fn saved(nvim: &Nvim) -> Vec<(String, String)> {
    let listed = nvim
        .lua(
            "return vim.tbl_map(function(s) return { s.title, s.id } end, require('agent').sessions())",
            vec![],
        )
        .await;
    crate::support::nvim::string_pairs(&listed)
}

#[tokio::test]
async fn two_conversations_resumed_after_a_restart_each_get_their_own_history_back() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            text("Answer one."),
            text("Answer two."),
            text("More one."),
            text("More two."),
        ],
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent first topic").await;
    nvim.wait_for_line(FIRST, "Answer one.").await;
    nvim.cmd("Agent new").await;
    nvim.cmd("Agent second topic").await;
    nvim.wait_for_line(SECOND, "Answer two.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let options = Options {
        ui: Some((120, 40)),
        ..mock_options(&mock, "")
    };
    let nvim = nvim.restart(options).await;
    let ids = saved(&nvim).await;
    let id_of = |title: &str| {
        ids.iter()
            .find(|(t, _)| t == title)
            .unwrap_or_else(|| panic!("{title} not saved: {ids:?}"))
            .1
            .clone()
    };
    // Each resumed in a tab page of its own, into that tab page's conversation.
    nvim.cmd(&format!("Agent resume {}", id_of("first topic")))
        .await;
    nvim.wait_for_line(FIRST, "resumed: first topic").await;
    nvim.cmd("Agent new").await;
    nvim.cmd(&format!("Agent resume {}", id_of("second topic")))
        .await;
    let second = nvim.wait_for_line(SECOND, "resumed: second topic").await;
    assert!(
        second.iter().any(|l| l == "Answer two.") && !second.iter().any(|l| l == "Answer one."),
        "{second:#?}"
    );
    let first = nvim.buffer_lines(FIRST).await;
    assert!(
        first.iter().any(|l| l == "Answer one.") && !first.iter().any(|l| l == "Answer two."),
        "{first:#?}"
    );
    // Each goes on with its own history only.
    nvim.lua("require('agent').show(1)", vec![]).await;
    nvim.cmd("Agent more on one").await;
    nvim.wait_for_line(FIRST, "More one.").await;
    nvim.lua("require('agent').show(2)", vec![]).await;
    nvim.cmd("Agent more on two").await;
    nvim.wait_for_line(SECOND, "More two.").await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    let (third, fourth) = (requests[2].body.to_string(), requests[3].body.to_string());
    assert!(
        third.contains("first topic")
            && third.contains("Answer one.")
            && !third.contains("second topic"),
        "{third}"
    );
    assert!(
        fourth.contains("second topic")
            && fourth.contains("Answer two.")
            && !fourth.contains("first topic"),
        "{fourth}"
    );
}

fn edit(path: &str, old: &str, new: &str) -> Reply {
    turn(vec![Part::ToolCall {
        id: "e1".into(),
        name: "edit_file".into(),
        args: json!({ "path": path, "old_str": old, "new_str": new }).to_string(),
    }])
}

#[tokio::test]
async fn a_rewind_in_one_conversation_names_another_ones_later_change_and_keeps_it_unless_told() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            edit("mine.txt", "mine 0", "mine 1"),
            text("Mine edited."),
            edit("theirs.txt", "theirs 0", "theirs 1"),
            text("Theirs edited."),
        ],
    );
    let nvim = Nvim::start(Options {
        ui: Some((120, 40)),
        ..mock_options(&mock, "auto_approve = true")
    })
    .await;
    nvim.write("mine.txt", "mine 0\n");
    nvim.write("theirs.txt", "theirs 0\n");
    nvim.cmd("Agent change mine").await;
    nvim.wait_for_line(FIRST, "Mine edited.").await;
    nvim.cmd("Agent new").await;
    nvim.cmd("Agent change theirs").await;
    nvim.wait_for_line(SECOND, "Theirs edited.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // Back in the first conversation, its code rewound to before its prompt: the other's later
    // change is named, and nothing is done until the person answers.
    nvim.api.input("<Esc>").await.unwrap();
    nvim.lua("require('agent').show(1)", vec![]).await;
    nvim.wait_for("vim.fn.tabpagenr() == 1").await;
    nvim.cmd("Agent rewind 1 code").await;
    let asked = nvim
        .wait_for_screen("[change theirs] changed theirs.txt since prompt 1")
        .await;
    assert!(asked.contains("1: Keep their changes"), "{asked}");
    // Cancel: nothing changes.
    nvim.api.input("3<CR>").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(nvim.read("mine.txt"), "mine 1\n");
    assert_eq!(nvim.read("theirs.txt"), "theirs 1\n");
    // Asked again and kept: only this conversation's file goes back.
    nvim.cmd("Agent rewind 1 code").await;
    nvim.wait_for_screen("[change theirs] changed theirs.txt since prompt 1")
        .await;
    nvim.api.input("1<CR>").await.unwrap();
    for _ in 0..100 {
        if nvim.read("mine.txt") == "mine 0\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(nvim.read("mine.txt"), "mine 0\n");
    assert_eq!(nvim.read("theirs.txt"), "theirs 1\n");
    // Said once the rewind is done (the files are written just before).
    let mut messages = String::new();
    for _ in 0..100 {
        messages = nvim.messages().await;
        if messages.contains("1 file put back (1 kept as another conversation left it)") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        messages.contains("1 file put back (1 kept as another conversation left it)"),
        "{messages}"
    );
    // Asked again and told to put them back too: the other's change is undone as well.
    nvim.cmd("Agent rewind 1 code").await;
    nvim.wait_for_screen("[change theirs] changed theirs.txt since prompt 1")
        .await;
    nvim.api.input("2<CR>").await.unwrap();
    for _ in 0..100 {
        if nvim.read("theirs.txt") == "theirs 0\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(nvim.read("theirs.txt"), "theirs 0\n");
    assert_eq!(nvim.read("mine.txt"), "mine 0\n");
}

#[tokio::test]
async fn a_worktree_conversation_writes_only_in_its_worktree_and_merges_into_the_main_tree_when_asked(
) {
    use agent_nvim_fixtures::user_repo::git;
    // The person's repository, with one commit.
    let (workspace, main) = repository();
    // The model's second call names the main tree's a.txt by its absolute path.
    let outside = main.join("a.txt").display().to_string();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            edit("a.txt", "alpha", "ALPHA"),
            edit(&outside, "alpha", "HACKED"),
            text("Done."),
        ],
    );
    let home = tempfile::tempdir().unwrap();
    let nvim = Nvim::start_in(
        Options {
            ui: Some((120, 40)),
            ..mock_options(&mock, "")
        },
        workspace,
        home,
    )
    .await;
    nvim.cmd("Agent new --worktree agent/fix").await;
    let intro = nvim.wait_for_line(FIRST, "worktree agent/fix in ").await;
    assert!(intro[0].contains("worktrees/"), "{intro:#?}");
    nvim.cmd("Agent fix it").await;
    // Its edit asks, as any does: allowed, it writes the worktree's file only.
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.cmd("Agent approve").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("1").await.unwrap();
    let chat = nvim.wait_for_line(FIRST, "Done.").await;
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "alpha\n"
    );
    // The main tree's file by its absolute path is outside this conversation's root: refused
    // by the path check, asked nothing.
    let told = mock.requests()[2].body.to_string();
    assert!(
        told.contains("resolves outside the workspace root"),
        "{chat:#?} {told}"
    );
    assert_eq!(
        nvim.lua("return require('agent.approval').pending()", vec![])
            .await
            .as_i64(),
        Some(0)
    );
    let dir = nvim
        .lua("return require('agent.chat').status().text and require('agent.chat.status').current.workspace", vec![])
        .await;
    let dir = std::path::PathBuf::from(dir.as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "ALPHA\n"
    );
    // :Agent diff base lists it.
    nvim.cmd("Agent diff base").await;
    let listed = nvim
        .lua(
            "return vim.tbl_map(function(i) return i.text end, vim.fn.getqflist())",
            vec![],
        )
        .await;
    assert_eq!(listed, rmpv::Value::Array(vec!["M a.txt".into()]));
    nvim.cmd("cclose").await;
    // A buffer of the main tree's a.txt with unsaved changes: the merge refuses, naming it.
    nvim.cmd(&format!("edit {}", main.join("a.txt").display()))
        .await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'typed' })",
        vec![],
    )
    .await;
    let refused = nvim
        .lua(
            "local said = {} local notify = vim.notify \
             vim.notify = function(m) said[#said + 1] = m end \
             require('agent').merge() vim.notify = notify return said[1]",
            vec![],
        )
        .await;
    assert!(
        refused
            .as_str()
            .unwrap()
            .contains("nothing was merged: a.txt has unsaved changes in Neovim"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "alpha\n"
    );
    nvim.cmd("edit!").await;
    // Merged: the main tree's file, not its index or branch.
    let head = git(&main, &["rev-parse", "HEAD"]);
    nvim.cmd("Agent merge").await;
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "ALPHA\n"
    );
    assert_eq!(git(&main, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&main, &["status", "--porcelain"]), " M a.txt\n");
    // Changed in the main tree since: a merge conflicts, writes nothing, and names the file.
    std::fs::write(main.join("a.txt"), "other\n").unwrap();
    let conflict = nvim
        .lua(
            "local said = {} local notify = vim.notify \
             vim.notify = function(m) said[#said + 1] = m end \
             require('agent').merge() vim.notify = notify return said[1]",
            vec![],
        )
        .await;
    assert!(
        conflict
            .as_str()
            .unwrap()
            .contains("nothing was merged: 1 file changed in the main working tree too (a.txt)"),
        "{conflict}"
    );
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "other\n"
    );
    // Removed (what it holds was merged: nothing to ask): its directory goes, its branch stays,
    // and so does the conversation.
    nvim.cmd("Agent worktree remove").await;
    assert!(!dir.exists(), "{}", nvim.messages().await);
    assert!(git(&main, &["branch", "--list", "agent/fix"]).contains("agent/fix"));
    assert_eq!(
        nvim.lua("return #require('agent').conversations()", vec![])
            .await
            .as_i64(),
        Some(0)
    );
}

#[tokio::test]
async fn without_git_a_worktree_says_why_it_cannot() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock).await;
    nvim.cmd("Agent new --worktree").await;
    let chat = nvim
        .wait_for_line(FIRST, "agent: a worktree needs a git repository, and ")
        .await;
    assert!(
        chat.iter().any(|l| l.contains("is not in one")),
        "{chat:#?}"
    );
}

#[tokio::test]
async fn a_conversation_open_in_one_tab_page_is_not_resumed_in_another() {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("Answer one.")]);
    let nvim = start(&mock).await;
    nvim.cmd("Agent first topic").await;
    nvim.wait_for_line(FIRST, "Answer one.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let (_, id) = saved(&nvim).await.remove(0);
    nvim.cmd("Agent new").await;
    nvim.cmd(&format!("Agent resume {id}")).await;
    nvim.wait_for_line(
        SECOND,
        "agent: that conversation is open already (conversation 1); go to it with :Agent list",
    )
    .await;
    // Its file was written by one conversation only: still one whole record a line.
    let file = nvim._home.path().join("state/nvim/agent/sessions");
    let found: Vec<_> = walk(&file)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&id))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    for line in std::fs::read_to_string(&found[0]).unwrap().lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[tokio::test]
async fn a_background_conversations_queued_prompt_stays_in_its_tab_and_showing_one_leaves_no_other_input(
) {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("First."), text("Second.")]).with_pace(
        crate::support::mock_llm::Pace {
            chunk_bytes: None,
            delay: std::time::Duration::from_millis(500),
        },
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent one").await;
    // Queued behind the running turn, in conversation 1.
    nvim.lua("require('agent').ask('two')", vec![]).await;
    nvim.cmd("Agent new").await;
    nvim.wait_for("vim.fn.tabpagenr() == 2").await;
    // Conversation 1 sends its queued prompt while tab page 2 is shown: its chat stays in its
    // own tab page.
    nvim.wait_for_line(FIRST, "Second.").await;
    assert_eq!(
        tab_buffers(&nvim).await,
        [
            "agent: chat,agent: input".to_string(),
            "agent: chat 2,agent: input 2".to_string()
        ]
    );
    // Tab page 2 holds only conversation 2's chat and input; tab page 1 is closed (conversation
    // 1 goes on, unshown). Showing conversation 1 here leaves nothing of conversation 2 to type
    // into.
    nvim.api.input("<Esc>").await.unwrap();
    nvim.cmd("wincmd t | close").await;
    nvim.cmd("1tabclose").await;
    nvim.lua("require('agent').show(1)", vec![]).await;
    assert_eq!(
        tab_buffers(&nvim).await,
        ["agent: chat,agent: input".to_string()]
    );
    nvim.wait_for_line(FIRST, "Second.").await;
}

#[tokio::test]
async fn an_acp_agent_with_worktree_true_works_in_a_worktree_of_its_own() {
    let (workspace, main) = repository();
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start_in(
        Options {
            ui: Some((120, 40)),
            env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
            setup: crate::support::nvim::setup_lua(&format!(
                "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}' }}, worktree = true }} }} }}"
            )),
        },
        workspace,
        tempfile::tempdir().unwrap(),
    )
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(FIRST, "connected to test (ACP)").await;
    let root = nvim
        .lua(
            "return require('agent.chat.status').current.workspace",
            vec![],
        )
        .await;
    let root = std::path::PathBuf::from(root.as_str().unwrap());
    assert!(root.to_string_lossy().contains("worktrees/"), "{root:?}");
    // The agent's own writes land in its worktree, never in the main tree.
    nvim.cmd("Agent write").await;
    nvim.wait_for_line(FIRST, "inside: written").await;
    assert!(root.join("written-by-agent.txt").exists());
    assert!(!main.join("written-by-agent.txt").exists());
}

#[tokio::test]
async fn always_in_this_project_given_in_the_main_tree_is_not_given_in_a_worktree() {
    let (workspace, _) = repository();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            command("echo same"),
            text("Main done."),
            command("echo same"),
            text("Worktree refused."),
        ],
    );
    let nvim = Nvim::start_in(
        Options {
            ui: Some((120, 40)),
            ..mock_options(&mock, "")
        },
        workspace,
        tempfile::tempdir().unwrap(),
    )
    .await;
    // In the main tree: `echo same` always allowed in this project (a lasting grant: twice).
    nvim.cmd("Agent run it").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    answer(&nvim, "aa").await;
    nvim.wait_for_line(FIRST, "Main done.").await;
    // In a worktree of it: the same command is asked about again.
    nvim.cmd("Agent new --worktree agent/other").await;
    nvim.cmd("Agent run it there").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.wait_for_screen("[run it there] echo same").await;
    answer(&nvim, "4").await;
    nvim.wait_for_line(SECOND, "Worktree refused.").await;
}

/// `:Agent fork with code N`: the fork works in a worktree of its own holding the files as they
/// were before prompt N; the main tree keeps what came after.
#[tokio::test]
async fn a_fork_with_code_gets_a_worktree_with_the_files_as_they_were_before_its_prompt() {
    use agent_nvim_fixtures::user_repo::git;
    let (workspace, main) = repository();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            edit("a.txt", "alpha", "beta"),
            text("one done"),
            edit("a.txt", "beta", "gamma"),
            text("two done"),
        ],
    );
    let home = tempfile::tempdir().unwrap();
    let nvim = Nvim::start_in(mock_options(&mock, "auto_approve = true"), workspace, home).await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(FIRST, "one done").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent second").await;
    nvim.wait_for_line(FIRST, "two done").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "gamma\n"
    );

    nvim.cmd("Agent fork with code 2").await;
    let forked = nvim.wait_for_line(SECOND, "one done").await;
    assert!(!forked.iter().any(|l| l.contains("two done")), "{forked:?}");
    // Its worktree holds a.txt as it was before the second prompt; the main tree is as it is.
    let listed = git(&main, &["worktree", "list", "--porcelain"]);
    let worktree = listed
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .map(std::path::PathBuf::from)
        .find(|path| path != &main)
        .unwrap_or_else(|| panic!("no worktree in {listed}"));
    assert_eq!(
        std::fs::read_to_string(worktree.join("a.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(
        std::fs::read_to_string(main.join("a.txt")).unwrap(),
        "gamma\n"
    );

    // A fork whose files could not be put in place leaves nothing: its worktree is removed
    // (forced: it holds nothing of the person's), its tab page closed.
    nvim.cmd("tabnext 1").await;
    nvim.lua(
        "local rpc = require('agent.rpc') \
         rpc.adopt = function() return nil, 'agent: refused for the test' end \
         _G.removed = {} \
         rpc.worktree = function(arg) \
           table.insert(_G.removed, { require('agent.conversations').active().id, arg.action, arg.force }) \
           return {} end \
         _G.notes = {} vim.notify = function(m) table.insert(_G.notes, m) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent fork with code 2").await;
    nvim.wait_for("vim.tbl_contains(_G.notes, 'agent: refused for the test')")
        .await;
    nvim.wait_for("vim.fn.tabpagenr('$') == 2").await;
    let removed = nvim.lua("return _G.removed", vec![]).await;
    assert_eq!(
        removed,
        rmpv::Value::Array(vec![rmpv::Value::Array(vec![
            rmpv::Value::from(3),
            rmpv::Value::from("remove"),
            rmpv::Value::from(true)
        ])]),
        "the worktree of the fork (conversation 3) is removed"
    );
}
