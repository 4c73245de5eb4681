--- `:Agent`: its arguments parsed into calls of the public API, and their completion. The API
--- (`require("agent")`) is passed in: this module never requires it.

local M = {}
local H = {}

--- The subcommands that take no argument, each given the public API.
H.subcommands = {
  approve = function(api)
    api.approve()
  end,
  approvals = function()
    require("agent.pickers").approvals()
  end,
  build = function()
    require("agent.install").build()
  end,
  stop = function(api)
    api.stop()
  end,
  new = function(api)
    api.new()
  end,
  ["new here"] = function(api)
    api.new({ here = true })
  end,
  merge = function(api)
    api.merge()
  end,
  ["worktree remove"] = function(api)
    api.worktree_remove()
  end,
  list = function(api)
    require("agent.pickers").conversations(api)
  end,
  close = function(api)
    api.close()
  end,
  permissions = function(api)
    api.permissions()
  end,
  compact = function(api)
    api.compact()
  end,
  follow = function()
    require("agent.follow").toggle()
  end,
  model = function(api)
    api.model()
  end,
  mode = function(api)
    api.mode()
  end,
  login = function(api)
    require("agent.choices").login(nil, api.acp)
  end,
  logout = function()
    require("agent.choices").logout()
  end,
  option = function(api)
    api.option()
  end,
  queue = function(api)
    require("agent.pickers").queued(api)
  end,
  log = function()
    local path = require("agent.rpc").logfile()
    if not vim.uv.fs_stat(path) then
      vim.notify(
        ("agent: no log yet at %s; the backend writes it once it starts (:Agent)"):format(path),
        vim.log.levels.INFO
      )
      return
    end
    require("agent.chat").leave()
    vim.cmd.edit(vim.fn.fnameescape(path))
    -- Read again if it was open (the backend has written since), and at its newest line.
    pcall(vim.cmd.checktime, vim.api.nvim_get_current_buf())
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  end,
}

--- The names of the preset agents the backend knows: the one list, lua/agent/acp_presets.json,
--- which the backend reads too (crates/acp/src/lib.rs).
---@return string[]
function M.acp_presets()
  if not H.presets then
    local path = require("agent.paths").acp_presets()
    local ok, list = pcall(function()
      return vim.json.decode(table.concat(vim.fn.readfile(path), "\n"))
    end)
    H.presets = {}
    for _, preset in ipairs(ok and type(list) == "table" and list or {}) do
      H.presets[#H.presets + 1] = preset.name
    end
  end
  return H.presets
end

--- Agent names for `:Agent acp`: configured ones, then the presets not overridden.
---@return string[]
function M.acp_names()
  local agents = require("agent.config").options.acp.agents or {}
  local names = vim.tbl_keys(agents)
  for _, preset in ipairs(M.acp_presets()) do
    if agents[preset] == nil then
      names[#names + 1] = preset
    end
  end
  table.sort(names)
  return names
end

--- Runs `:Agent {args}`.
---@param api table the public API
---@param cmd table the argument of nvim_create_user_command's callback
function M.run(api, cmd)
  H.run(api, cmd)
end

-- M.run's parsing: each form returns as soon as it has called the API.
function H.run(api, cmd)
  local args = vim.trim(cmd.args or "")
  local sub = H.subcommands[args]
  if sub then
    return sub(api)
  end
  local method = args:match("^build%s+(%S+)%s*$")
  if method then
    return require("agent.install").build({ method = method })
  end
  if args:match("^rewind%s+undo$") then
    return api.rewind("undo")
  end
  if args == "rewind" then
    return api.rewind()
  end
  local turn, mode = args:match("^rewind%s+(%d+)%s*(%a*)$")
  if turn then
    return api.rewind(tonumber(turn), mode ~= "" and mode or nil)
  end
  if args:match("^rewind%s") then
    vim.notify("agent: use :Agent rewind [{n} [both|code|conversation]] or :Agent rewind undo", vim.log.levels.ERROR)
    return
  end
  local resume_id = args:match("^resume%s*(%S*)%s*$")
  if resume_id then
    return api.resume(resume_id)
  end
  local branch = args:match("^new%s+%-%-worktree%s*(%S*)%s*$")
  if branch then
    return api.new({ worktree = branch ~= "" and branch or true })
  end
  local since = args:match("^diff%s*(%S*)%s*$")
  if since then
    if since ~= "" and since ~= "all" and since ~= "base" then
      vim.notify(("agent: :Agent diff takes nothing, `all` or `base`, not `%s`"):format(since), vim.log.levels.ERROR)
      return
    end
    return api.diff({ since = since == "" and "prompt" or since })
  end
  local model = args:match("^model%s+(.-)%s*$")
  if model then
    return api.model(model)
  end
  local login = args:match("^login%s+(%S+)%s*$")
  if login then
    return require("agent.choices").login(login, api.acp)
  end
  local mode = args:match("^mode%s+(%S+)%s*$")
  if mode then
    return api.mode(mode)
  end
  local option, value = args:match("^option%s+(%S+)%s*(%S*)%s*$")
  if option then
    return api.option(option, value ~= "" and value or nil)
  end
  local name = args:match("^name%s+(.-)%s*$")
  if name or args == "name" then
    return api.name(name)
  end
  local acp_name = args:match("^acp%s+(%S+)%s*$")
  if acp_name or args == "acp" then
    return api.acp(acp_name)
  end
  local fork_turn = args == "fork" and "" or args:match("^fork%s+(%d+)%s*$")
  if fork_turn then
    return api.fork({ turn = tonumber(fork_turn) })
  end
  local code_turn = args == "fork with code" and "" or args:match("^fork%s+with%s+code%s+(%d+)%s*$")
  if code_turn then
    return api.fork({ turn = tonumber(code_turn), code = true })
  end
  local export = args == "export" and "" or args:match("^export%s+(.-)%s*$")
  if export then
    return api.export(export ~= "" and export or nil)
  end
  local question = args == "btw" and "" or args:match("^btw%s+(.-)%s*$")
  if question then
    return api.btw(question)
  end
  -- `:Agent edit {instruction}`, on the range given, else the function or line at the cursor.
  local instruction = args == "edit" and "" or args:match("^edit%s+(.-)%s*$")
  if instruction then
    local ranged = cmd.range and cmd.range > 0
    return api.edit({
      instruction = instruction,
      first = ranged and cmd.line1 or nil,
      last = ranged and cmd.line2 or nil,
    })
  end
  if cmd.range and cmd.range > 0 then
    local context = require("agent.context.ask").selection(cmd.line1, cmd.line2)
    if args == "" then
      return require("agent.context.ask").interactive(api, context)
    end
    return api.ask(args, { context = context and context.text })
  end
  if args == "" then
    return api.open()
  end
  api.ask(args)
end

--- Completes `:Agent`'s arguments: the subcommands, then each one's own (agent names, session
--- ids, models, rewind points...). Never starts the backend.
---@param api table the public API
---@param arglead string
---@param cmdline string
---@return string[]
function M.complete(api, arglead, cmdline)
  local rest = cmdline:match("Agent!?%s+(.*)$") or ""
  if rest:match("^build%s+%S*$") then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, { "cargo", "download" })
  end
  if rest:match("^acp%s+%S*$") then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, M.acp_names())
  end
  if rest:match("^resume%s+%S*$") then
    -- Only from a running backend, as for rewind: completing must not start one. Only the ids
    -- of our own files: listing them whole reads every file, and asks an external agent.
    local rpc = require("agent.rpc")
    local ids = rpc.running() and rpc.session_ids() or {}
    return vim.tbl_filter(function(id)
      return type(id) == "string" and vim.startswith(id, arglead)
    end, ids)
  end
  if rest:match("^model%s+%S*$") then
    local choices = require("agent.choices")
    local names = choices.connected() and choices.model_option() and choices.complete("model") or api.models()
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, names)
  end
  local choices = require("agent.choices")
  local listed = rest:match("^login%s+%S*$") and choices.complete("login")
    or rest:match("^mode%s+%S*$") and choices.complete("mode")
    or rest:match("^option%s+%S*$") and choices.complete("option")
    or rest:match("^option%s+(%S+)%s+%S*$") and choices.complete("value", rest:match("^option%s+(%S+)"))
  if listed then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, listed)
  end
  if rest:match("^diff%s+%S*$") then
    return vim.tbl_filter(function(word)
      return vim.startswith(word, arglead)
    end, { "all", "base" })
  end
  local candidates
  if rest:match("^rewind%s+%S*$") then
    -- Only from a running backend: completing must not start one.
    local rpc = require("agent.rpc")
    local points = rpc.running() and rpc.rewind_points() or {}
    candidates = vim.tbl_map(function(point)
      return point.undo and "undo" or tostring(point.turn)
    end, points)
  elseif rest:match("^rewind%s+%d+%s+%S*$") then
    candidates = { "both", "code", "conversation" }
  end
  if candidates then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, candidates)
  end
  if rest:match("^new%s+%S*$") then
    return vim.tbl_filter(function(word)
      return vim.startswith(word, arglead)
    end, { "here", "--worktree" })
  end
  if rest:match("^worktree%s+%S*$") then
    return vim.startswith("remove", arglead) and { "remove" } or {}
  end
  if rest:find("%s") then
    return {}
  end
  local names = vim.tbl_filter(function(name)
    return not name:find(" ")
  end, vim.tbl_keys(H.subcommands))
  table.insert(names, "name")
  table.insert(names, "worktree")
  table.insert(names, "acp")
  table.insert(names, "resume")
  table.insert(names, "rewind")
  table.insert(names, "diff")
  table.insert(names, "edit")
  table.insert(names, "btw")
  table.insert(names, "export")
  table.insert(names, "fork")
  table.sort(names)
  return vim.tbl_filter(function(name)
    return vim.startswith(name, arglead)
  end, names)
end

return M
