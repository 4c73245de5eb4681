-- agent.nvim: the :Agent command and the <Plug> maps. Nothing is required here: the modules and
-- the backend load on first use, so this file costs Neovim's start-up next to nothing.
if vim.g.loaded_agent then
  return
end
vim.g.loaded_agent = true

vim.api.nvim_create_user_command("Agent", function(cmd)
  require("agent")._command(cmd)
end, {
  nargs = "*",
  range = true,
  desc = "agent: open the conversation, send a prompt, or stop|new|log|build",
  complete = function(arglead, cmdline)
    return require("agent")._complete(arglead, cmdline)
  end,
})

vim.api.nvim_set_keymap("n", "<Plug>(agent-ask)", "", {
  noremap = true,
  desc = "agent: ask about the current line",
  callback = function()
    require("agent").ask()
  end,
})
vim.api.nvim_set_keymap("x", "<Plug>(agent-ask)", "", {
  noremap = true,
  desc = "agent: ask about the selection",
  callback = function()
    require("agent").ask()
  end,
})

-- The default key (keymaps.ask in lua/agent/config.lua), so the plugin works without setup().
-- Skipped when setup() already ran (it maps the configured key itself), when the user mapped
-- <Plug>(agent-ask) to a key of their own, or when the key is taken.
local config = package.loaded["agent.config"]
if not (config and config.did_setup) then
  for _, mode in ipairs({ "n", "x" }) do
    if vim.fn.hasmapto("<Plug>(agent-ask)", mode) == 0 and vim.fn.maparg("<leader>aa", mode) == "" then
      vim.api.nvim_set_keymap(mode, "<leader>aa", "<Plug>(agent-ask)", { desc = "agent: ask" })
    end
  end
end
