--- The Lua side's checks that tests/suite/lua_tooling.rs runs in Neovim, with the plugin on the
--- runtimepath: `dofile("tests/lua/checks.lua").NAME(arg)` returns the list of problems found,
--- empty when all is well.
---
--- help_defaults(root): the defaults printed in `:help agent-config` (and the keys in
--- `:help agent-approval-keys`) are the config module's, key for key and value for value, and the
--- `agent.Config` annotations name every top-level option.
---
--- annotations(path): a module's public functions (`function M.name(...)`, names not starting
--- with `_`) each have a description, a `---@param` for every parameter, and a `---@return` when
--- they return a value. The file is read as StyLua leaves it (the test command checks that): a
--- function's body is indented below it, and so is the body of a function nested in it, which is
--- how a `return` of a nested function is told from one of the public function.

local M = {}

local function read_lines(path)
  local file = assert(io.open(path, "r"))
  local lines = vim.split(file:read("*a"), "\n", { plain = true })
  file:close()
  return lines
end
local problems = {}
local function problem(fmt, ...)
  problems[#problems + 1] = fmt:format(...)
end

--- The first `>lua` code block after the line holding `tag`, with the help's indent removed.
local function code_block(lines, tag)
  local start
  for i, line in ipairs(lines) do
    if line:find(tag, 1, true) then
      start = i
      break
    end
  end
  if not start then
    return nil
  end
  local block, inside = {}, false
  for i = start, #lines do
    local line = lines[i]
    if inside then
      if line:match("^<") then
        return block
      end
      block[#block + 1] = (line:gsub("^    ", ""))
    elseif line:match(">lua$") then
      inside = true
    end
  end
  return nil
end

--- The dotted path of every `key = value` line of a block, nested by indentation, so that keys
--- shown as `key = nil` (which evaluating the block drops) are seen too.
local function documented_paths(block)
  local paths, stack = {}, {}
  for _, line in ipairs(block) do
    local indent, key, value = line:match("^(%s*)([%a_][%w_]*) = (.*)$")
    if key then
      while #stack > 0 and stack[#stack].indent >= #indent do
        stack[#stack] = nil
      end
      local parents = vim.tbl_map(function(entry)
        return entry.key
      end, stack)
      parents[#parents + 1] = key
      paths[table.concat(parents, ".")] = true
      if value:match("^{%s*$") or value:match("^{%s*%-%-") then
        stack[#stack + 1] = { indent = #indent, key = key }
      end
    end
  end
  return paths
end

--- Compares two values, naming each differing leaf by its dotted path. Lists are compared whole.
local function compare(section, path, documented, actual)
  local both_maps = type(documented) == "table"
    and type(actual) == "table"
    and not vim.islist(documented)
    and not vim.islist(actual)
  if both_maps then
    local keys = {}
    for k in pairs(documented) do
      keys[k] = true
    end
    for k in pairs(actual) do
      keys[k] = true
    end
    for k in pairs(keys) do
      compare(section, path == "" and k or (path .. "." .. k), documented[k], actual[k])
    end
  elseif not vim.deep_equal(documented, actual) then
    problem(
      "`%s`: :help %s says %s, lua/agent/config.lua has %s",
      path,
      section,
      vim.inspect(documented),
      vim.inspect(actual)
    )
  end
end

--- The private table of lua/agent/config.lua (its `H`, an upvalue of setup()), for its schema:
--- the list of every option that exists, those whose default is nil included.
local function config_internals(config)
  for i = 1, 100 do
    local name, value = debug.getupvalue(config.setup, i)
    if name == nil then
      break
    end
    if name == "H" then
      return value
    end
  end
  return nil
end

function M.help_defaults(root)
  problems = {}
  local config = require("agent.config")
  local defaults = config.defaults()
  local H = config_internals(config)
  if type(H) ~= "table" or type(H.schema) ~= "table" then
    problem("lua/agent/config.lua: setup() no longer sees `H.schema`; update tests/lua/help_defaults.lua")
    return problems
  end
  local options = {}
  for path in pairs(H.schema) do
    options[path] = true
  end

  local help = read_lines(root .. "/doc/agent.txt")

  -- The defaults block of :help agent-config.
  local block = code_block(help, "*agent-config*")
  if not block then
    problem("doc/agent.txt: no `>lua` block after *agent-config*")
    return problems
  end
  local chunk, err = loadstring("return " .. table.concat(block, "\n"))
  if not chunk then
    problem("doc/agent.txt: the *agent-config* block is not a Lua table: %s", err)
    return problems
  end
  compare("agent-config", "", chunk(), defaults)
  local paths = documented_paths(block)
  for path in pairs(paths) do
    if not options[path] then
      problem("`%s` is in :help agent-config but is not an option of lua/agent/config.lua", path)
    end
  end
  for path in pairs(options) do
    if not paths[path] then
      problem("`%s` is an option of lua/agent/config.lua missing from :help agent-config", path)
    end
  end

  -- The setup() example of :help agent-approval-keys shows the picker's default keys.
  local keys = code_block(help, "*agent-approval-keys*")
  local keys_chunk = keys and loadstring(table.concat(keys, "\n"))
  if not keys_chunk then
    problem("doc/agent.txt: no loadable `>lua` block after *agent-approval-keys*")
  else
    local given
    setfenv(keys_chunk, {
      require = function()
        return {
          setup = function(opts)
            given = opts
          end,
        }
      end,
    })
    keys_chunk()
    compare("agent-approval-keys", "", given, { keymaps = { approval = defaults.keymaps.approval } })
  end

  -- The LuaCATS class of the options: one `---@field` per top-level option, optional (`name?`)
  -- exactly when its default is nil.
  local fields, in_class = {}, false
  for _, line in ipairs(read_lines(root .. "/lua/agent/config.lua")) do
    if line:match("^%-%-%-@class agent%.Config") then
      in_class = true
    elseif in_class then
      local name, optional = line:match("^%-%-%-@field ([%a_][%w_]*)(%??) ")
      if name then
        fields[name] = optional == "?"
      elseif not line:match("^%-%-%-") then
        break
      end
    end
  end
  for path in pairs(options) do
    if not path:find(".", 1, true) then
      if fields[path] == nil then
        problem("`%s` has no `---@field` in the agent.Config class of lua/agent/config.lua", path)
      elseif fields[path] ~= (defaults[path] == nil) then
        problem(
          "`---@field %s` in agent.Config should be %s: its default is %s",
          path,
          defaults[path] == nil and "optional (a `?` after the name)" or "required (no `?`)",
          vim.inspect(defaults[path])
        )
      end
    end
  end
  for name in pairs(fields) do
    if not options[name] then
      problem("`---@field %s` in agent.Config is not an option of lua/agent/config.lua", name)
    end
  end
  table.sort(problems)
  return problems
end

--- True when the body (the lines after `function M.x(...)` up to its `end`) returns a value.
local function returns_value(lines, first)
  local nested = {} -- indents of the nested functions open at this line
  for i = first, #lines do
    local line = lines[i]
    if line:match("^end") then
      return false
    end
    local indent = #line:match("^%s*")
    while #nested > 0 and indent <= nested[#nested] and line:match("^%s*end") do
      nested[#nested] = nil
    end
    if #nested == 0 and line:match("^%s*return%s+[^%s]") then
      return true
    end
    if line:find("function%s*%(") and not line:find("%f[%w]end%f[%W]") then
      nested[#nested + 1] = indent
    end
  end
  return false
end

function M.annotations(path)
  local problems = {}
  local lines = read_lines(path)
  local count = 0
  for i, line in ipairs(lines) do
    local name, params = line:match("^function M%.([%a][%w_]*)%((.-)%)")
    if name then
      count = count + 1
      local doc = {}
      local j = i - 1
      while j >= 1 and lines[j]:match("^%-%-%-") do
        table.insert(doc, 1, lines[j])
        j = j - 1
      end
      local described, documented, has_return = false, {}, false
      for _, d in ipairs(doc) do
        local param = d:match("^%-%-%-@param ([%w_]+)%??%s+%S")
        if param then
          documented[param] = true
        elseif d:match("^%-%-%-@return%s+%S") then
          has_return = true
        elseif not d:match("^%-%-%-@") and d:match("^%-%-%-%s*%S") then
          described = true
        end
      end
      local where = ("%s:%d: M.%s"):format(path, i, name)
      if not described then
        problems[#problems + 1] = where .. " has no `---` description"
      end
      for param in params:gmatch("[%w_]+") do
        if not documented[param] then
          problems[#problems + 1] = ("%s: parameter `%s` has no `---@param %s <type>`"):format(where, param, param)
        end
      end
      if returns_value(lines, i + 1) and not has_return then
        problems[#problems + 1] = where .. " returns a value but has no `---@return <type>`"
      end
    end
  end
  if count == 0 then
    problems[#problems + 1] = path .. ": no `function M.name(...)` found; is this the module's file?"
  end
  return problems
end

return M
