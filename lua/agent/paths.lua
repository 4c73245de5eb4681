--- Where the plugin keeps things: its root, the two places a backend binary comes from, the
--- preset agents' list, and the log. The one place these paths are spelled out (agent.rpc and agent.install both use them).

local M = {}

--- The plugin's root: the directory holding lua/ and plugin/.
---@return string
function M.root()
  local source = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(source, ":p:h:h:h")
end

local function exe()
  return vim.fn.has("win32") == 1 and ".exe" or ""
end

--- Where `:Agent build` installs the binary, and the record of how it got there.
---@return string binary
---@return string record
function M.installed()
  local dir = M.root() .. "/bin"
  return dir .. "/agent-nvim" .. exe(), dir .. "/agent-nvim.json"
end

--- Where `cargo build --release` in the plugin's directory puts the binary.
---@return string
function M.built()
  return M.root() .. "/target/release/agent-nvim" .. exe()
end

--- The list of preset ACP agents, which the backend compiles in too (crates/acp/src/lib.rs).
---@return string
function M.acp_presets()
  return M.root() .. "/lua/agent/acp_presets.json"
end

--- `path` relative to `root` (`.` for the root itself), or nil when it is not inside it. Both
--- absolute and spelled alike (normalized, or both resolved).
---@param path string
---@param root string
---@return string?
function M.within(path, root)
  if path == root then
    return "."
  end
  local prefix = root:sub(-1) == "/" and root or (root .. "/")
  if path:sub(1, #prefix) == prefix then
    return path:sub(#prefix + 1)
  end
  return nil
end

--- The log file the backend writes (`agent-nvim nvim --log FILE`).
---@return string
function M.logfile()
  return vim.fn.stdpath("log") .. "/agent.log"
end

return M
