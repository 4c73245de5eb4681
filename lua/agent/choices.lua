--- What the connected external agent lets a person choose for its session: its modes and its
--- config options (a model, a mode, a reasoning level, switches), as the backend last reported
--- them (`modes` and `options` events), chosen with :Agent mode, :Agent option and :Agent model,
--- and remembered per agent name (in stdpath("state")/agent/acp-choices.json) for its next
--- session that offers them. See :help agent-acp-choices.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local M = {}
local H = {}
H.conversation = ({ ... })[2] -- the number of the conversation this copy serves

H.file = function()
  return vim.fn.stdpath("state") .. "/agent/acp-choices.json"
end

--- Forgets the agent's choices (another agent starts, or :Agent new), and what the winbar
--- showed of them.
function M.reset()
  H.name, H.modes, H.current, H.options, H.applied = nil, nil, nil, nil, {}
  H.login = nil -- { needed = bool, methods = { { id, name, terminal?, args?, env? } } }
  H.memory = nil -- the remembered choices, read once per connection (H.load)
  -- This conversation's own status (the copy's sibling).
  local s = require("agent.chat.status").current
  s.agent_model, s.mode, s.context, s.agent_cost, s.title = nil, nil, nil, nil, nil
end
M.reset()

--- Takes an event the backend sent (`acp_started`, `modes`, `options`) and applies, once per
--- connection, what was remembered for this agent where it is offered.
---@param event table
function M.on_event(event)
  if event.type == "acp_started" then
    H.name = tostring(event.name)
  elseif event.type == "modes" then
    H.modes = type(event.modes) == "table" and event.modes or {}
    H.current = event.current
  elseif event.type == "options" then
    H.options = type(event.options) == "table" and event.options or {}
  elseif event.type == "login" then
    local methods = type(event.methods) == "table" and #event.methods > 0 and event.methods
      or (H.login and H.login.methods)
      or {}
    H.login = { needed = event.needed == true, methods = methods }
    return
  else
    return
  end
  H.apply_remembered()
end

--- The modes offered (`{ id, name, description? }`) and the current one's id; nil when the agent
--- offers none. A mode option (category `mode`) stands for them when the agent has one.
---@return table[]? modes
---@return string? current
function M.modes()
  local option = M.mode_option()
  if option then
    return option.values or {}, option.current
  end
  return H.modes, H.current
end

--- The config options offered (`{ id, name, kind, current, values, category? }`), or nil.
---@return table[]?
function M.options()
  return H.options
end

--- The option about the mode, when the agent offers one.
---@return table?
function M.mode_option()
  for _, option in ipairs(H.options or {}) do
    if option.category == "mode" then
      return option
    end
  end
end

--- Whether `option` chooses the model.
---@param option table
---@return boolean
function M.is_model(option)
  return option.category == "model" or (option.category == nil and option.id == "model")
end

--- The option about the model, when the agent offers one.
---@return table?
function M.model_option()
  for _, option in ipairs(H.options or {}) do
    if M.is_model(option) then
      return option
    end
  end
end

--- How the winbar names an option's current value: its value's name, `on`/`off`.
---@param option table
---@return string
function M.value_name(option)
  if option.kind == "boolean" then
    return option.current == true and "on" or "off"
  end
  for _, value in ipairs(option.values or {}) do
    if value.id == option.current then
      return tostring(value.name)
    end
  end
  return tostring(option.current)
end

--- Whether an external agent is connected (choices go to it).
---@return boolean
function M.connected()
  return H.name ~= nil
end

--- :Agent mode [ID]: without an id, picks one with vim.ui.select.
---@param id? string
function M.mode(id)
  local modes, current = M.modes()
  if not modes or #modes == 0 then
    return H.fail(H.name and ("%s offers no modes"):format(H.name) or "modes are an external agent's (:Agent acp)")
  end
  if not id or id == "" then
    return H.pick(modes, "agent: mode", current, function(picked)
      M.mode(picked.id)
    end)
  end
  if not H.find(modes, id) then
    return H.fail(("%s has no mode '%s'; its modes: %s"):format(H.name or "the agent", id, H.ids(modes)))
  end
  local option = M.mode_option()
  if option then
    H.remember("options", option.id, id)
  else
    H.remember("mode", nil, id)
  end
  H.send("mode", id)
end

--- :Agent model [ID] for an external agent: its model option's value.
---@param id? string
function M.model(id)
  local option = M.model_option()
  if not option then
    return H.fail(("%s does not let its model be chosen here"):format(H.name or "the agent"))
  end
  M.option(option.id, id)
end

--- :Agent option [ID [VALUE]]: without a value, picks one (and without an id, the option first).
--- A boolean takes on/off (true/false).
---@param id? string
---@param value? string|boolean
function M.option(id, value)
  local options = H.options or {}
  if #options == 0 then
    return H.fail(H.name and ("%s offers no options"):format(H.name) or "options are an external agent's (:Agent acp)")
  end
  if not id or id == "" then
    return H.pick(options, "agent: option", nil, function(picked)
      M.option(picked.id)
    end, function(option)
      return ("%s: %s"):format(option.name, M.value_name(option))
    end)
  end
  local option = H.find(options, id)
  if not option then
    return H.fail(("%s has no option '%s'; its options: %s"):format(H.name or "the agent", id, H.ids(options)))
  end
  if value == nil or value == "" then
    local values = option.kind == "boolean" and { { id = true, name = "on" }, { id = false, name = "off" } }
      or option.values
      or {}
    return H.pick(values, ("agent: %s"):format(option.name), option.current, function(picked)
      M.option(option.id, picked.id)
    end)
  end
  if option.kind == "boolean" then
    local truth = { [true] = true, on = true, ["true"] = true, [false] = false, off = false, ["false"] = false }
    if truth[value] == nil then
      return H.fail(("%s (%s) is on or off"):format(option.name, option.id))
    end
    value = truth[value]
  elseif not H.find(option.values or {}, value) then
    return H.fail(
      ("%s (%s) has no value '%s'; its values: %s"):format(option.name, option.id, value, H.ids(option.values or {}))
    )
  end
  H.remember("options", option.id, value)
  H.send("option", option.id, value)
end

--- :Agent login [METHOD]: logs in to the connected agent with one of the ways it offers
--- (picked with vim.ui.select when not named). An agent's own method is done by the agent
--- (`authenticate`), and then the session it refused opens; a terminal method runs the agent's
--- command with the method's arguments in a terminal split, and starts the agent again once
--- that exits 0.
---@param id? string
---@param restart fun(name: string) starts the agent again after a terminal login (:Agent acp)
function M.login(id, restart)
  local methods = H.login and H.login.methods or {}
  if #methods == 0 then
    return H.fail(
      H.name and ("%s has not asked for a login (or offers no way to log in from here)"):format(H.name)
        or "no external agent is connected (:Agent acp)"
    )
  end
  if not id or id == "" then
    return H.pick(methods, ("agent: log in to %s"):format(H.name), nil, function(picked)
      M.login(picked.id, restart)
    end)
  end
  local method = H.find(methods, id)
  if not method then
    return H.fail(("%s has no login method '%s'; its methods: %s"):format(H.name, id, H.ids(methods)))
  end
  if method.terminal then
    return H.terminal_login(method, restart)
  end
  H.send("login", id)
end

--- :Agent logout: logs out of the connected agent, where it offers to.
function M.logout()
  if not H.name then
    return H.fail("no external agent is connected (:Agent acp)")
  end
  H.send("logout", "")
end

--- Completion for :Agent mode / option / model: ids of what is offered.
---@param kind "mode"|"option"|"model"|"value"
---@param option_id? string for "value": the option whose values
---@return string[]
function M.complete(kind, option_id)
  local items = {}
  if kind == "mode" then
    items = M.modes() or {}
  elseif kind == "option" then
    items = H.options or {}
  elseif kind == "model" then
    items = (M.model_option() or {}).values or {}
  elseif kind == "login" then
    items = H.login and H.login.methods or {}
  elseif kind == "value" then
    local option = H.find(H.options or {}, option_id)
    if option and option.kind == "boolean" then
      return { "on", "off" }
    end
    items = option and option.values or {}
  end
  return vim.tbl_map(function(item)
    return tostring(item.id)
  end, items)
end

-- Helpers ------------------------------------------------------------------------------------

-- Sends a choice to the backend (agent.rpc.choose's message; agent.rpc requires this module, so
-- this one goes to the wire itself).
function H.send(kind, id, value)
  local wire = require("agent.rpc.wire")
  wire.notify(wire.method.CHOOSE, { kind = kind, id = id, value = value })
end

-- The command that starts agent `name`: setup()'s, else the preset's.
function H.agent_command(name)
  local configured = (require("agent.config").options.acp.agents or {})[name]
  if configured and configured.cmd then
    return vim.deepcopy(configured.cmd), configured.env or {}
  end
  local fd = io.open(require("agent.paths").acp_presets(), "r")
  local presets = fd and vim.json.decode(fd:read("*a")) or {}
  if fd then
    fd:close()
  end
  for _, preset in ipairs(presets) do
    if preset.name == name then
      return vim.deepcopy(preset.cmd), {}
    end
  end
end

-- Runs the agent's command with the method's arguments in a terminal split; once it exits 0,
-- the agent is started again (:Agent acp NAME), which now finds the login.
function H.terminal_login(method, restart)
  local name = H.name
  local cmd, env = H.agent_command(name)
  if not cmd then
    return H.fail(("cannot tell how %s is started, so its terminal login cannot run"):format(name))
  end
  for _, arg in ipairs(method.args or {}) do
    cmd[#cmd + 1] = tostring(arg)
  end
  -- What runs is shown first, the agent's own words and variables with it (not the ones of
  -- setup(), which may hold keys), and runs only when the person says so: it runs in Neovim,
  -- outside any sandbox the agent has.
  env = vim.deepcopy(env)
  local sets = {}
  for _, pair in ipairs(method.env or {}) do
    env[tostring(pair[1])] = tostring(pair[2])
    sets[#sets + 1] = ("%s=%s"):format(tostring(pair[1]), tostring(pair[2]))
  end
  local shown = table.concat(cmd, " ")
  if #sets > 0 then
    shown = table.concat(sets, " ") .. " " .. shown
  end
  vim.ui.select({ "Run it", "Cancel" }, {
    prompt = ("agent: log in to %s by running `%s` in a terminal (outside any sandbox)?"):format(name, shown),
    kind = "agent.login",
  }, function(choice)
    if choice == "Run it" then
      H.run_login(name, cmd, env, restart)
    end
  end)
end

-- Runs the login command in a terminal split; restarts the agent when it exits 0.
function H.run_login(name, cmd, env, restart)
  vim.cmd("botright new")
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].bufhidden = "wipe"
  local ok, job = pcall(vim.fn.jobstart, cmd, {
    term = true,
    env = next(env) and env or nil,
    on_exit = function(_, code)
      vim.schedule(function()
        if code == 0 then
          -- In the conversation that asked to log in, whichever tab page is current now.
          local conversations = require("agent.conversations")
          if not conversations.get(H.conversation) then
            return
          end
          vim.notify(("agent: logged in; starting %s again"):format(name), vim.log.levels.INFO)
          conversations.acting(H.conversation, restart, name)
        else
          H.fail(("the login in the terminal exited %d; :Agent login to try again"):format(code))
        end
      end)
    end,
  })
  if not ok or job <= 0 then
    H.fail(("could not run %s: %s"):format(table.concat(cmd, " "), tostring(job)))
    return
  end
  vim.cmd("startinsert")
end

function H.fail(message)
  vim.notify("agent: " .. message, vim.log.levels.ERROR)
end

function H.find(items, id)
  for _, item in ipairs(items) do
    if item.id == id then
      return item
    end
  end
end

function H.ids(items)
  return table.concat(
    vim.tbl_map(function(item)
      return tostring(item.id)
    end, items),
    ", "
  )
end

-- vim.ui.select over `items`, the current one marked.
function H.pick(items, prompt, current, done, label)
  vim.ui.select(items, {
    prompt = prompt,
    kind = "agent.choice",
    format_item = function(item)
      local text = label and label(item) or tostring(item.name)
      if current ~= nil and item.id == current then
        text = text .. " (current)"
      end
      if item.description and item.description ~= vim.NIL then
        text = text .. " — " .. tostring(item.description)
      end
      return text
    end,
  }, function(picked)
    if picked then
      done(picked)
    end
  end)
end

-- The remembered choices, by agent name: `{ [name] = { mode = id, options = { [id] = value } } }`.
function H.load()
  if H.memory then
    return H.memory
  end
  local fd = io.open(H.file(), "r")
  local text = fd and fd:read("*a")
  if fd then
    fd:close()
  end
  local ok, saved = pcall(vim.json.decode, text or "")
  H.memory = ok and type(saved) == "table" and saved or {}
  return H.memory
end

function H.remember(kind, id, value)
  if not H.name then
    return
  end
  -- Chosen now: what was remembered before is not sent after it.
  H.applied[kind == "mode" and "mode:" or ("option:" .. id)] = true
  H.memory = nil -- another Neovim may have written since: read, change, write
  local saved = H.load()
  local mine = type(saved[H.name]) == "table" and saved[H.name] or {}
  if kind == "mode" then
    mine.mode = value
  else
    mine.options = type(mine.options) == "table" and mine.options or {}
    mine.options[id] = value
  end
  saved[H.name] = mine
  vim.fn.mkdir(vim.fn.fnamemodify(H.file(), ":h"), "p")
  local fd = io.open(H.file(), "w")
  if fd then
    fd:write(vim.json.encode(saved))
    fd:close()
  end
end

-- Once per connection, when the agent first offers it, each remembered choice it does not
-- have already is sent; an option first offered later (or chosen by the person before it was
-- applied) is not touched again.
function H.apply_remembered()
  if not H.name then
    return
  end
  local mine = H.load()[H.name]
  if type(mine) ~= "table" then
    mine = {}
  end
  if H.modes and not M.mode_option() and not H.applied["mode:"] then
    H.applied["mode:"] = true
    if mine.mode and mine.mode ~= H.current and H.find(H.modes, mine.mode) then
      H.send("mode", mine.mode)
    end
  end
  local remembered = type(mine.options) == "table" and mine.options or {}
  for _, option in ipairs(H.options or {}) do
    local key = "option:" .. option.id
    local value = remembered[option.id]
    if not H.applied[key] then
      H.applied[key] = true
      local takes = option.kind == "boolean" and type(value) == "boolean"
        or option.kind ~= "boolean" and value ~= nil and H.find(option.values or {}, value) ~= nil
      if takes and option.current ~= value then
        H.send("option", option.id, value)
      end
    end
  end
end

return M
