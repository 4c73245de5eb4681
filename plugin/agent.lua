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

vim.api.nvim_set_keymap("n", "<Plug>(agent-edit)", "", {
  noremap = true,
  desc = "agent: edit the function or line at the cursor in place",
  callback = function()
    require("agent").edit()
  end,
})
vim.api.nvim_set_keymap("x", "<Plug>(agent-edit)", "", {
  noremap = true,
  desc = "agent: edit the selection in place",
  callback = function()
    require("agent").edit()
  end,
})

-- The default key (keymaps.ask in lua/agent/config.lua), so the plugin works without setup().
-- Skipped when setup() already ran (it maps the configured key itself), when the user mapped
-- <Plug>(agent-ask) to a key of their own, or when the key is taken.
local config = package.loaded["agent.config"]
if not (config and config.did_setup) then
  for _, pair in ipairs({
    { "<Plug>(agent-ask)", "<leader>aa", "agent: ask" },
    { "<Plug>(agent-edit)", "<leader>ae", "agent: edit in place" },
  }) do
    for _, mode in ipairs({ "n", "x" }) do
      if vim.fn.hasmapto(pair[1], mode) == 0 and vim.fn.maparg(pair[2], mode) == "" then
        vim.api.nvim_set_keymap(mode, pair[2], pair[1], { desc = pair[3] })
      end
    end
  end
end
