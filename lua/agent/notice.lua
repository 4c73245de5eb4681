--- The notice when a turn ends (done, failed) or waits for an approval while the person is not
--- looking: Neovim has lost focus (FocusLost), or the chat is not shown in the current tab.
--- `vim.notify` says it (`agent: done · fix the failing test (42 s)`), and `notify_command`
--- (setup(), a list such as { "notify-send", "agent.nvim" }) is run with the message after
--- its words, so a desktop notice can appear. With several conversations open, the notice
--- names the one it is about (`agent: [fix tests] done · ...`). See :help agent-notify.

local M = {}
local H = { focused = true }

-- What each conversation's running prompt is, by conversation: { words, since }.
H.turns = {}

--- How many of the prompt's words the notice quotes.
H.WORDS = 6

--- Starts following the editor's focus (once).
function M.watch()
  if H.watching then
    return
  end
  H.watching = true
  local group = vim.api.nvim_create_augroup("agent.notice", { clear = true })
  vim.api.nvim_create_autocmd("FocusLost", {
    group = group,
    callback = function()
      H.focused = false
    end,
  })
  vim.api.nvim_create_autocmd("FocusGained", {
    group = group,
    callback = function()
      H.focused = true
    end,
  })
end

--- A prompt was sent: what a notice about its turn quotes, and when it began.
---@param prompt string
function M.prompted(prompt)
  local words = {}
  for word in tostring(prompt):gmatch("%S+") do
    words[#words + 1] = word
    if #words == H.WORDS then
      break
    end
  end
  H.turns[H.conversation().id] = { words = table.concat(words, " "), since = vim.uv.now() }
end

--- The turn ended with `outcome` ("done", "failed", "max_turns"; a cancel is the person's own
--- and says nothing).
---@param outcome string
function M.turn_done(outcome)
  if outcome == "cancelled" then
    return
  end
  local said = ({ done = "done", failed = "failed", max_turns = "stopped (max turns)" })[outcome] or tostring(outcome)
  local turn = H.turns[H.conversation().id] or {}
  local secs = turn.since and math.floor((vim.uv.now() - turn.since) / 1000) or 0
  M.notice(("agent: %s%s · %s (%d s)"):format(H.whose(), said, turn.words or "", secs), outcome == "failed")
end

--- An approval is waiting.
function M.approval()
  local turn = H.turns[H.conversation().id] or {}
  M.notice(("agent: %swaiting for approval · %s"):format(H.whose(), turn.words or ""), false)
end

--- Says `message` when the person is not looking: vim.notify, then notify_command.
---@param message string
---@param failed boolean
function M.notice(message, failed)
  if H.focused and require("agent.chat.window").visible() then
    return
  end
  vim.notify(message, failed and vim.log.levels.WARN or vim.log.levels.INFO)
  local command = require("agent.config").options.notify_command
  if type(command) ~= "table" or #command == 0 then
    return
  end
  local argv = vim.deepcopy(command)
  argv[#argv + 1] = message
  local ok, err = pcall(vim.system, argv, { text = true }, function(done)
    if done.code ~= 0 then
      vim.schedule(function()
        H.warn_once(("agent: notify_command exited %d: %s"):format(done.code, vim.trim(done.stderr or "")))
      end)
    end
  end)
  if not ok then
    H.warn_once(("agent: notify_command could not run (%s); check setup({ notify_command = ... })"):format(err))
  end
end

-- The conversation the notice is about: the one acted for (its events are being shown).
function H.conversation()
  return require("agent.conversations").active()
end

-- `[name] ` when several conversations are open, so the notice says whose turn it was.
function H.whose()
  local conversations = require("agent.conversations")
  if #conversations.all() < 2 then
    return ""
  end
  return ("[%s] "):format(conversations.label(H.conversation()))
end

-- A broken notify_command is said once, not at every turn.
function H.warn_once(message)
  if H.warned then
    return
  end
  H.warned = true
  vim.notify(message, vim.log.levels.WARN)
end

--- For tests: whether Neovim is taken to have the focus.
---@return boolean
function M.focused()
  return H.focused
end

return M
