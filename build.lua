-- Run by lazy.nvim after install and update (a build.lua in the plugin's root needs no `build`
-- key): gets the backend binary for this plugin's version, downloading it or building it with
-- cargo (see :help agent-install). It waits for the end, so a headless `Lazy! sync` installs it.
-- lazy.nvim runs this file without loading the plugin first, so it puts its own directory on
-- the runtimepath when it is not there yet.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
local on_path = vim.tbl_contains(
  vim.tbl_map(function(dir)
    return vim.fn.fnamemodify(dir, ":p"):gsub("/$", "")
  end, vim.api.nvim_list_runtime_paths()),
  root
)
if not on_path then
  vim.opt.runtimepath:prepend(root)
end
local ok, message = require("agent.install").build({ wait = true })
if not ok then
  error(message, 0)
end
