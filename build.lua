-- Run by lazy.nvim after install and update (a build.lua in the plugin's root needs no `build`
-- key): gets the backend binary for this plugin's version, downloading it or building it with
-- cargo (see :help agent-install). It waits for the end, so a headless `Lazy! sync` installs it.
local ok, message = require("agent.install").build({ wait = true })
if not ok then
  error(message, 0)
end
