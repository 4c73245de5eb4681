//! Images in prompts in a real Neovim, against the mock server (`:help agent-images`): a PNG
//! attached with `@`, another pasted with the input's paste key from a clipboard tool on PATH
//! (a stand-in `wl-paste`), both sent as base64 image content and shown as rows under the
//! prompt; a text-only model refused before sending; a resumed conversation sends them again.

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use agent_nvim_fixtures::pictures;

const CHAT: &str = "agent: chat";

fn answer(text: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(text.into())],
        usage: (10, 2),
    }
}

/// A Neovim whose PATH finds `bin` first (the stand-in clipboard tool), on Wayland.
fn options(mock: &MockLlm, bin: &std::path::Path, extra: &str) -> Options {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
            ("PATH".into(), path),
            ("WAYLAND_DISPLAY".into(), "wayland-test".into()),
        ],
        setup: setup_lua(extra),
    }
}

/// A `wl-paste` in a new folder that prints `picture` (and notes its arguments).
fn fake_wl_paste(picture: &[u8]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    std::fs::write(bin.path().join("clip.png"), picture).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$@\" > '{dir}/args'\ncat '{dir}/clip.png'\n",
        dir = bin.path().display()
    );
    let tool = bin.path().join("wl-paste");
    std::fs::write(&tool, script).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The base64 images of the last user message of request `n` (Anthropic's image blocks).
fn images_of(mock: &MockLlm, n: usize) -> Vec<String> {
    let body = &mock.requests()[n].body;
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .clone();
    user["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "image")
        .map(|b| b["source"]["data"].as_str().unwrap().to_string())
        .collect()
}

/// Every base64 image of request `n`, in order.
fn all_images_of(mock: &MockLlm, n: usize) -> Vec<String> {
    let body = &mock.requests()[n].body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "image")
        .map(|b| b["source"]["data"].as_str().unwrap().to_string())
        .collect()
}

/// Types `text` into the chat's input as a person does, in Insert mode.
async fn type_in_input(nvim: &Nvim, text: &str) {
    nvim.lua(
        "require('agent').open() \
         vim.api.nvim_set_current_win(vim.fn.bufwinid(require('agent.chat.window').input_buf)) \
         vim.cmd('startinsert')",
        vec![],
    )
    .await;
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    nvim.api.input(text).await.unwrap();
}

#[tokio::test]
async fn an_at_image_and_a_pasted_one_are_sent_shown_as_rows_and_sent_again_after_a_resume() {
    let shot = pictures::png(64, 40, 1);
    let pasted = pictures::png(30, 30, 2);
    let bin = fake_wl_paste(&pasted);
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![answer("A chart and a square."), answer("Still the same.")],
    );
    let nvim = Nvim::start(options(&mock, bin.path(), "")).await;
    std::fs::write(nvim.workspace.path().join("shot.png"), &shot).unwrap();
    // The clipboard tool is found and named.
    let health = nvim.checkhealth().await;
    assert!(
        health.contains(&format!(
            "clipboard images: {}/wl-paste --no-newline --type image/png",
            bin.path().display()
        )),
        "{health}"
    );

    type_in_input(&nvim, "what is in @shot.png and ").await;
    nvim.api.input("<C-v>").await.unwrap();
    nvim.wait_for("vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, 1, false)[1]:find('#image:%d') ~= nil")
        .await;
    assert_eq!(
        std::fs::read_to_string(bin.path().join("args"))
            .unwrap()
            .trim(),
        "--no-newline --type image/png"
    );
    nvim.api.input("?<C-s>").await.unwrap();
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    assert_eq!(
        images_of(&mock, 0),
        vec![pictures::base64(&shot), pictures::base64(&pasted)]
    );
    // Each image is a row under the prompt, with its name, size and weight.
    let text = lines.join("\n");
    let shot_row = format!(
        "image: shot.png · 64×40 · {}",
        agent_nvim::llm::image::size(shot.len())
    );
    let pasted_row = format!(
        "image: clipboard · 30×30 · {}",
        agent_nvim::llm::image::size(pasted.len())
    );
    assert!(text.contains(&shot_row), "{text}");
    assert!(text.contains(&pasted_row), "{text}");
    // The model reads the rows too, after the typed text.
    let body = &mock.requests()[0].body;
    let sent_text = body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "text")
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sent_text.starts_with("what is in @shot.png and #image:"),
        "{sent_text}"
    );
    assert!(
        sent_text.contains(&format!("[attached: {shot_row}]")),
        "{sent_text}"
    );

    // The images were saved beside the session, 0600, and a resumed conversation sends them
    // again with its first prompt.
    let images: Vec<_> =
        crate::support::files_beneath(&nvim._home.path().join("state/nvim/agent/sessions"))
            .into_iter()
            .filter(|p| p.parent().unwrap().ends_with("images"))
            .collect();
    assert_eq!(images.len(), 2, "{images:?}");
    use std::os::unix::fs::PermissionsExt;
    for image in &images {
        assert_eq!(
            std::fs::metadata(image).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let nvim = nvim.restart(options(&mock, bin.path(), "")).await;
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) on_choice(items[1]) end",
        vec![],
    )
    .await;
    // A picture viewer (image.nvim's interface) that notes what it is asked to draw.
    nvim.lua(
        "_G.drawn = {} _G.cleared = 0 package.loaded['image'] = { from_file = function(file, opts) \
           table.insert(_G.drawn, { file = file, y = opts.y }) \
           return { render = function() end, clear = function() _G.cleared = _G.cleared + 1 end } end }",
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    let resumed = nvim
        .wait_for_line(CHAT, "resumed: what is in @shot.png and")
        .await;
    let resumed = resumed.join("\n");
    assert!(
        resumed.contains(&shot_row) && resumed.contains(&pasted_row),
        "{resumed}"
    );
    // Each saved image drawn again under its row, from the file it was saved as.
    nvim.wait_for("#_G.drawn == 2").await;
    let drawn = nvim
        .lua(
            "local b = require('agent.chat.window').buf \
             return vim.tbl_map(function(d) \
               return { d.file, vim.api.nvim_buf_get_lines(b, d.y - 1, d.y, false)[1] } end, _G.drawn)",
            vec![],
        )
        .await;
    let drawn = crate::support::nvim::string_pairs(&drawn);
    assert_eq!(drawn.len(), 2, "{drawn:?}");
    for ((file, row), expected) in drawn.iter().zip([&shot_row, &pasted_row]) {
        assert!(
            row.contains(expected.as_str()),
            "{row:?} should be {expected:?}"
        );
        assert!(
            images
                .iter()
                .any(|saved| saved.display().to_string() == *file),
            "{file} is not one of {images:?}"
        );
    }
    nvim.cmd("Agent and now?").await;
    nvim.wait_for_line(CHAT, "Still the same.").await;
    assert_eq!(
        all_images_of(&mock, 1),
        vec![pictures::base64(&shot), pictures::base64(&pasted)]
    );
    // A new conversation in its place takes the pictures down with the rows.
    assert_eq!(
        nvim.lua("return _G.cleared", vec![]).await,
        rmpv::Value::from(0)
    );
    nvim.cmd("Agent new here").await;
    nvim.wait_for("_G.cleared == 2").await;
}

#[tokio::test]
async fn a_huge_image_is_scaled_a_text_only_model_refused_and_a_file_outside_the_root_never_read() {
    let bin = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("Wide.")]);
    let nvim = Nvim::start(options(&mock, bin.path(), "")).await;
    std::fs::write(
        nvim.workspace.path().join("wide.png"),
        pictures::png(6000, 4000, 5),
    )
    .unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.png"), pictures::png(8, 8, 9)).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.png"),
        nvim.workspace.path().join("link.png"),
    )
    .unwrap();
    nvim.cmd("Agent look at @wide.png and @link.png").await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let sent = images_of(&mock, 0);
    assert_eq!(sent.len(), 1, "only the workspace's image");
    let bytes = pictures::unbase64(&sent[0]);
    assert_eq!(pictures::size_of(&bytes), (1568, 1045));
    assert!(bytes.len() <= agent_nvim::llm::image::MAX_BYTES);
    let text = lines.join("\n");
    assert!(text.contains("image: wide.png · 1568×1045 · "), "{text}");
    assert!(text.contains("· scaled from 6000×4000"), "{text}");
    assert!(text.contains("@ link.png: "), "{text}");
    assert!(!mock.requests()[0]
        .body
        .to_string()
        .contains(&pictures::base64(&pictures::png(8, 8, 9))));

    // A model the person marked as reading text only: refused, with the reason, before sending.
    let nvim = nvim
        .restart(options(
            &mock,
            bin.path(),
            "models = { ['claude-sonnet-4-5'] = { images = false } }, model = 'claude-sonnet-4-5'",
        ))
        .await;
    std::fs::write(
        nvim.workspace.path().join("small.png"),
        pictures::png(10, 10, 4),
    )
    .unwrap();
    nvim.cmd("Agent what is @small.png?").await;
    nvim.wait_for_line(
        CHAT,
        "claude-sonnet-4-5 does not take images, so nothing was sent; pick a model that does with :Agent model, or send the prompt without the image",
    )
    .await;
    assert_eq!(mock.requests().len(), 1, "nothing more reached the model");
    // The prompt waits in the input to be sent again.
    nvim.wait_for(
        "vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)[1] == 'what is @small.png?'",
    )
    .await;
}

#[tokio::test]
async fn an_audio_clip_is_refused_by_the_built_in_agent_before_anything_is_sent() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("unused")]);
    let bin = tempfile::tempdir().unwrap();
    let nvim = Nvim::start(options(&mock, bin.path(), "")).await;
    std::fs::write(
        nvim.workspace.path().join("note.wav"),
        agent_nvim_fixtures::sounds::wav(8),
    )
    .unwrap();
    nvim.cmd("Agent what is said in @note.wav?").await;
    let lines = nvim
        .wait_for_line(
            CHAT,
            "agent: the built-in agent's models take no audio, so nothing was sent; send the prompt without the clip, or use an external agent that takes audio (:help agent-acp-audio)",
        )
        .await;
    // The clip's row was shown under the prompt, as an image's is.
    assert!(
        lines.iter().any(|l| l.contains("audio: note.wav · 60 B")),
        "{lines:#?}"
    );
    assert!(mock.requests().is_empty(), "nothing reached the model");
    nvim.wait_for(
        "vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)[1] == 'what is said in @note.wav?'",
    )
    .await;
}
