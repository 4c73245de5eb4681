//! An inline edit's turn (`:Agent edit`), and a side question's agent (`:Agent btw`): a focused request of its own, never in a
//! conversation's history. It runs an [`Agent`] of its own over the session's tools (the same
//! gate, workspace, editor and checkpoints), with edit_file on the file asked about going to the
//! person's buffer ([`InlineEdit`]), and talks to the conversation's provider or the one
//! `inline = { provider, model }` chose.

use std::sync::Arc;

use crate::agent::Agent;
use crate::llm::{Client, ProviderChoice, ProviderConfig, ProviderError};
use crate::tools::inline::{Buffer, InlineEdit};
use crate::tools::{Executor, ToolContext};

/// What the person asked, and about which lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// The file, relative to the root.
    pub rel: String,
    /// The lines asked about, 1-based, inclusive.
    pub first: u64,
    pub last: u64,
    /// The buffer's filetype (the fence's language); may be empty.
    pub filetype: String,
    /// The lines asked about and some around them, each as `12: text`, from the buffer.
    pub excerpt: String,
    /// The diagnostics on the lines asked about, each as `line 12: error: message`.
    pub diagnostics: Vec<String>,
    /// What to change.
    pub instruction: String,
}

/// The one message an inline edit's turn sends: the file, the range, the lines, the
/// diagnostics and the instruction, and that the answer is edit_file calls on that file.
pub fn prompt(ask: &Ask) -> String {
    let lines = if ask.first == ask.last {
        format!("line {}", ask.first)
    } else {
        format!("lines {}-{}", ask.first, ask.last)
    };
    let longest = ask
        .excerpt
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(3.max(longest + 1));
    let mut text = format!(
        "Edit {lines} of {rel} as asked below. Answer with edit_file calls on {rel}: it is open \
         in the person's editor, and old_str is looked for in the buffer's text (the lines shown \
         here, numbers left out), which may differ from the file on disk. Change only what the \
         request needs, keep the file's style, and do not rewrite lines that stay the same. The \
         person sees your change in the buffer and keeps or drops each part of it. After the \
         edit, say in one sentence what you changed.\n\n\
         {lines} of {rel}, with the lines around them:\n{fence}{ft}\n{excerpt}\n{fence}\n",
        rel = ask.rel,
        ft = ask.filetype,
        excerpt = ask.excerpt.trim_end_matches('\n'),
    );
    if !ask.diagnostics.is_empty() {
        text.push_str(&format!("\nDiagnostics on {lines}:\n"));
        for diagnostic in &ask.diagnostics {
            text.push_str("- ");
            // One line each, and not a novel: a diagnostic is the file's, read by the model.
            let line = diagnostic.lines().next().unwrap_or_default();
            text.push_str(crate::text::clamp_head(line, 500).0);
            text.push('\n');
        }
    }
    text.push_str(&format!("\nThe request: {}", ask.instruction.trim()));
    text
}

/// The agent of one inline edit: the session's tools with edit_file of `path` (resolved)
/// going to `buffer`, talking to the provider `choice` names, with the project's instruction
/// files. Errors as [`crate::session::agent`] does when the provider cannot be configured.
pub fn agent(
    choice: &ProviderChoice,
    tools: ToolContext,
    path: std::path::PathBuf,
    buffer: Arc<dyn Buffer>,
    max_turns: u32,
    instructions: Vec<String>,
) -> Result<Agent, ProviderError> {
    let executor = Executor::new(tools).with_tool(Box::new(InlineEdit::new(path, buffer)));
    over(choice, executor, max_turns, instructions)
}

/// An agent over `executor`, talking to the provider `choice` names, with the project's
/// instruction files: what the built-in conversation's agent ([`crate::session::agent`]), an
/// inline edit's and a side question's are built from.
pub(crate) fn over(
    choice: &ProviderChoice,
    executor: Executor,
    max_turns: u32,
    instructions: Vec<String>,
) -> Result<Agent, ProviderError> {
    let provider = ProviderConfig::resolve(choice, &|name| std::env::var(name).ok())?;
    let client = Client::new(provider, &executor.catalogue())?;
    Ok(Agent::new(client, executor, max_turns).with_instructions(instructions))
}

/// An agent for side questions (`:Agent btw`, [`Agent::aside`]): the session's tools (offered,
/// never run) and instruction files, the provider `choice` names.
pub fn side_agent(
    choice: &ProviderChoice,
    tools: ToolContext,
    instructions: Vec<String>,
) -> Result<Agent, ProviderError> {
    over(choice, Executor::new(tools), 1, instructions)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn the_prompt_holds_the_file_the_lines_the_diagnostics_and_the_request() {
        let ask = Ask {
            rel: "src/a.py".into(),
            first: 3,
            last: 5,
            filetype: "python".into(),
            excerpt: "3: def f():\n4:     return ```\n5: \n".into(),
            diagnostics: vec!["line 4: error: unterminated string".into()],
            instruction: "  fix it \n".into(),
        };
        let text = prompt(&ask);
        assert!(text.starts_with("Edit lines 3-5 of src/a.py"), "{text}");
        // The fence is longer than any backtick run inside.
        assert!(
            text.contains("````python\n3: def f():\n4:     return ```\n5: \n````\n"),
            "{text}"
        );
        assert!(
            text.contains("Diagnostics on lines 3-5:\n- line 4: error: unterminated string\n"),
            "{text}"
        );
        assert!(text.ends_with("The request: fix it"), "{text}");
    }

    #[tokio::test]
    async fn a_side_question_sends_the_view_and_the_question_and_adds_nothing_to_any_history() {
        use crate::llm::Message;
        use agent_nvim_fixtures::mock_llm::{MockLlm, Part, Reply, Wire};
        let mock = MockLlm::start(
            Wire::Ollama,
            vec![Reply::Turn {
                parts: vec![Part::Text("It is 42.".into())],
                usage: (7, 3),
            }],
        );
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolContext {
            workspace: crate::workspace::Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(crate::approval::Gate::new(false, None)),
            editor: Arc::new(crate::editor::NoEditor),
            settings: Default::default(),
            checkpoints: None,
        };
        let choice = ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(mock.base_url()),
            ..Default::default()
        };
        let mut agent = side_agent(&choice, tools, Vec::new()).unwrap();
        let view = vec![
            Message::User("what is the answer?".into()),
            Message::Assistant {
                text: "Let me think.".into(),
                calls: Vec::new(),
                reasoning: Vec::new(),
            },
        ];
        let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let aside = agent
            .aside(
                &view,
                "  and in short? ",
                &events,
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(aside.text, "It is 42.");
        assert!(!aside.called_tools);
        let mut streamed = String::new();
        while let Ok(event) = seen.try_recv() {
            if let crate::agent::Event::Text { text } = event {
                streamed.push_str(&text);
            }
        }
        assert_eq!(streamed, "It is 42.");
        let sent = mock.requests()[0].body["messages"].clone();
        let sent = sent.as_array().unwrap();
        // The system prompt, the view as given, then the question with its preface.
        assert_eq!(sent[1]["content"], "what is the answer?");
        let last = sent.last().unwrap()["content"].as_str().unwrap();
        assert!(
            last.starts_with("[A side question, answered apart"),
            "{last}"
        );
        assert!(last.ends_with("\n\nand in short?"), "{last}");
        assert!(agent.history().is_empty());
    }
}
