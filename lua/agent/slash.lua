--- Slash commands in the chat's input (see :help agent-slash): `/new`, `/resume`,
--- `/rewind`, `/diff`, `/model`, `/compact`, `/btw`, `/stop`, `/permissions` and `/help` do what the
--- `:Agent` subcommand of the same name does; an external agent's own commands (its
--- `available_commands_update`) are sent to it as typed, which is what ACP asks of a client.

local M = {}
local H = {}

---@class agent.SlashCommand
---@field name string without the `/`
---@field description string
---@field agent? boolean one of the external agent's own commands

--- The built-in commands, in the order completion offers them.
---@type agent.SlashCommand[]
M.builtin = {
  { name = "new", description = "a fresh conversation" },
  { name = "resume", description = "continue a saved one [id]" },
  { name = "rewind", description = "back to before a prompt" },
  { name = "diff", description = "what the agent changed" },
  { name = "model", description = "switch the model [name]" },
  { name = "mode", description = "the agent's mode [id]" },
  { name = "option", description = "one of the agent's options [id [value]]" },
  { name = "compact", description = "summarise the conversation" },
  { name = "btw", description = "a side question, not added to the conversation {question}" },
  { name = "stop", description = "stop the running turn" },
  { name = "permissions", description = "the permission rules" },
  { name = "help", description = "these commands and the keys" },
}

--- Built-in commands that act on the conversation's context: when the external agent has one
--- of the same name (Claude Code's `/compact`), it is the agent's, which holds that context.
M.agent_first = { compact = true }

--- Whether built-in command `name` means something for the conversation prompts go to now:
--- with an external agent connected, /compact is the built-in agent's only, /model needs the
--- agent's model option, and /mode and /option what it offers; without one, those two do not.
---@param name string
---@return boolean
function M.applies(name)
  local choices = require("agent.choices")
  local connected = choices.connected()
  if name == "compact" then
    return not connected
  elseif name == "model" then
    return not connected or choices.model_option() ~= nil
  elseif name == "mode" then
    return connected and (choices.modes() or {})[1] ~= nil
  elseif name == "option" then
    return connected and (choices.options() or {})[1] ~= nil
  end
  return true
end

--- Every command completion offers: the built-in ones that apply now (M.applies), then the
--- connected external agent's.
---@return agent.SlashCommand[]
function M.commands()
  local list = {}
  local taken = {}
  for _, command in ipairs(M.builtin) do
    if M.applies(command.name) and not (M.agent_first[command.name] and H.agent_has(command.name)) then
      list[#list + 1] = vim.deepcopy(command)
      taken[command.name] = true
    end
  end
  for _, command in ipairs(require("agent.rpc").agent_commands()) do
    if not taken[command.name] then
      list[#list + 1] = {
        name = command.name,
        description = command.hint and ("%s (%s)"):format(command.description, command.hint) or command.description,
        agent = true,
      }
    end
  end
  return list
end

--- The external agent's command `text` starts with, if it does: such a prompt goes to the agent
--- exactly as typed (no attachments added).
---@param text string
---@return string?
function M.for_agent(text)
  local name = H.name(text)
  if not name or (H.builtin(name) and not M.agent_first[name]) then
    return nil
  end
  return H.agent_has(name) and name or nil
end

--- Runs `text` when it is a built-in command, with `api` (require("agent")) doing the work.
--- True when it was handled (run, or an unknown command refused with a word); false when it is
--- to be sent as a prompt (not a command, or the external agent's own). `refused` is true for
--- an unknown command: the input keeps it, to be fixed.
---@param text string
---@param api table require("agent")
---@return boolean handled
---@return boolean? refused
function M.run(text, api)
  local name = H.name(text)
  if not name then
    return false
  end
  local args = vim.trim(text:sub(#name + 2))
  local run = H.builtin(name) and not M.for_agent(text) and H.run[name]
  if run then
    run(api, args)
    return true
  end
  if M.for_agent(text) then
    return false
  end
  require("agent.chat").say(
    ("agent: no command /%s; /help lists them (start with a space to send it as a prompt)"):format(name),
    vim.log.levels.WARN
  )
  return true, true
end

--- `/help`: the commands, then the keys of the input and of the chat, in one float.
function M.help()
  local rows = {}
  for _, command in ipairs(M.builtin) do
    rows[#rows + 1] = { "/" .. command.name, command.description }
  end
  local keyhelp = require("agent.keyhelp")
  local window = require("agent.chat.window")
  local lines = keyhelp.section("Commands (typed in the input; :help agent-slash)", rows)
  if window.input_buf and vim.api.nvim_buf_is_valid(window.input_buf) then
    lines[#lines + 1] = ""
    vim.list_extend(lines, keyhelp.section("Keys in the input", keyhelp.keys(window.input_buf, { "n", "i" })))
  end
  if window.buf and vim.api.nvim_buf_is_valid(window.buf) then
    lines[#lines + 1] = ""
    vim.list_extend(lines, keyhelp.section("Keys in the chat", keyhelp.keys(window.buf, { "n" })))
  end
  keyhelp.open(lines)
end

-- Helpers ------------------------------------------------------------------------------------

-- The command name `text` starts with (`/name`, then a blank or the end), or nil.
function H.name(text)
  return text:match("^/([%w][%w_%-%.:]*)%f[%s%z]")
end

-- Whether `commands` holds one named `name`.
function H.named(commands, name)
  for _, command in ipairs(commands) do
    if command.name == name then
      return true
    end
  end
  return false
end

-- Whether the connected external agent lists command `name`.
function H.agent_has(name)
  return H.named(require("agent.rpc").agent_commands(), name)
end

function H.builtin(name)
  return H.named(M.builtin, name)
end

-- `api[name](args)` when the API has it; else says the command is not built yet.
function H.if_built(api, name, args)
  if type(api[name]) ~= "function" then
    vim.notify(("agent: /%s is not built yet"):format(name), vim.log.levels.INFO)
    return
  end
  api[name](args ~= "" and args or nil)
end

-- What each built-in does: the :Agent subcommand's own function (or its parser, for those with
-- arguments).
H.run = {
  new = function(api)
    api.new({ here = true })
  end,
  resume = function(api, args)
    api.resume(args ~= "" and args or nil)
  end,
  rewind = function(api, args)
    api._command({ args = vim.trim("rewind " .. args) })
  end,
  diff = function(api, args)
    api._command({ args = vim.trim("diff " .. args) })
  end,
  model = function(api, args)
    H.if_built(api, "model", args)
  end,
  mode = function(api, args)
    api._command({ args = vim.trim("mode " .. args) })
  end,
  option = function(api, args)
    api._command({ args = vim.trim("option " .. args) })
  end,
  compact = function(api, args)
    H.if_built(api, "compact", args)
  end,
  stop = function(api)
    api.stop()
  end,
  btw = function(api, args)
    api.btw(args)
  end,
  permissions = function(api)
    api.permissions()
  end,
  help = function()
    M.help()
  end,
}

return M
