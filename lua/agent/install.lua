--- Getting the backend: `:Agent build` and build.lua. Downloads the release binary matching this
--- plugin's version and the machine's platform, checks its sha256, and installs it into
--- <plugin>/bin/agent-nvim; or builds it with `cargo build --release` (asked for, or when the
--- release has no binary for this platform and cargo is on PATH) and installs that copy there.
--- Beside the binary, bin/agent-nvim.json records how it got there, for :checkhealth agent.
---
--- Nothing here blocks Neovim: curl, the checksum tool and cargo run through vim.system, and each
--- step continues in a callback. `M.build({ wait = true })` waits for the end (build.lua, run by
--- the plugin manager, possibly headless).

local M = {}
local H = {}

-- True while a build runs.
H.busy = false

--- The plugin's version: the release whose binary is downloaded. It must equal Cargo.toml's
--- package version (tests/suite/install.rs checks it; the release workflow checks the tag).
M.VERSION = "0.1.0"

--- Where releases are published: the GitHub path the README installs from, which is assumed (it
--- stands in until the repository has its public home; change it here only). The environment
--- variable AGENT_NVIM_RELEASE_URL overrides the whole base URL.
M.REPOSITORY = "agent-nvim/agent.nvim"

--- The outcome of the last build in this Neovim: { ok = boolean, message = string }.
---@type { ok: boolean, message: string }?
M.last = nil

--- The base URL the assets are fetched from: `<base>/v<version>/<asset>`.
---@return string
function M.base_url()
  local env = vim.env.AGENT_NVIM_RELEASE_URL
  if env and env ~= "" then
    return (env:gsub("/+$", ""))
  end
  return ("https://github.com/%s/releases/download"):format(M.REPOSITORY)
end

--- The Rust target triple of the binary for this machine, or nil and the platform's name.
---@return string? target
---@return string platform
function M.target()
  local uname = vim.uv.os_uname()
  local arch = ({ x86_64 = "x86_64", amd64 = "x86_64", aarch64 = "aarch64", arm64 = "aarch64" })[uname.machine]
  local os = ({ Linux = "unknown-linux-musl", Darwin = "apple-darwin" })[uname.sysname]
  local platform = ("%s %s"):format(uname.sysname, uname.machine)
  if not arch or not os then
    return nil, platform
  end
  return ("%s-%s"):format(arch, os), platform
end

--- The asset's file name for a target (the `.sha256` file is this plus `.sha256`).
---@param target string
---@return string
function M.asset(target)
  return ("agent-nvim-%s-%s"):format(M.VERSION, target)
end

--- Where `:Agent build` installs the binary, and its record.
---@return string binary
---@return string record
function M.paths()
  return require("agent.paths").installed()
end

--- How the installed binary got there (the record `:Agent build` wrote), or nil.
---@return table?
function M.record()
  local _, record = M.paths()
  local fd = io.open(record, "r")
  if not fd then
    return nil
  end
  local text = fd:read("*a")
  fd:close()
  local ok, decoded = pcall(vim.json.decode, text)
  return ok and type(decoded) == "table" and decoded or nil
end

--- Gets the backend. `method`: "auto" (download; cargo when the release has no binary for this
--- platform and cargo is on PATH), "download" or "cargo". Reports with vim.notify (messages start
--- with `agent:`), and calls `on_done(ok, message)`. With `wait`, returns only when done.
---@param opts? { method?: "auto"|"download"|"cargo", wait?: boolean, timeout?: integer, on_done?: fun(ok: boolean, message: string) }
---@return boolean? ok when waited for
---@return string? message when waited for
function M.build(opts)
  opts = opts or {}
  local method = opts.method or "auto"
  local result = nil ---@type { ok: boolean, message: string }?
  -- Always on a later tick, so an early failure reads like a late one (and an error message is
  -- not an error of the :Agent command itself).
  -- keep_busy: this call never started a build, so a running one stays marked.
  local function finish(ok, message, keep_busy)
    if not keep_busy then
      H.busy = false
    end
    vim.schedule(function()
      result = { ok = ok, message = message }
      M.last = result
      vim.notify(message, ok and vim.log.levels.INFO or vim.log.levels.ERROR)
      if opts.on_done then
        opts.on_done(ok, message)
      end
    end)
  end
  local known = method == "auto" or method == "download" or method == "cargo"
  local problem = known and not H.busy and H.bin_dir_problem()
  if not known then
    finish(
      false,
      ("agent: unknown build method %q; use :Agent build, :Agent build download or :Agent build cargo"):format(method),
      true
    )
  elseif H.busy then
    -- Two builds at once would share the temporary files in bin/.
    finish(
      false,
      "agent: a build is already running; wait for its message, then run :Agent build again if needed",
      true
    )
  elseif problem then
    finish(false, problem)
  elseif method == "cargo" then
    H.busy = true
    H.cargo(nil, finish)
  else
    H.busy = true
    H.download(function(ok, message, missing)
      if ok or not missing or method == "download" then
        return finish(ok, message)
      end
      if vim.fn.executable("cargo") == 1 then
        H.progress(message .. "; building it with cargo instead")
        return H.cargo(message, finish)
      end
      finish(false, message .. "; " .. H.by_hand_cargo("cargo is not on PATH either"))
    end)
  end
  if opts.wait then
    -- Generous: a first cargo build takes minutes on a slow machine.
    vim.wait(opts.timeout or 30 * 60 * 1000, function()
      return result ~= nil
    end, 50)
    if not result then
      return false, "agent: the build did not finish in time; run :Agent build again and see its messages"
    end
    return result.ok, result.message
  end
end

-- Helpers ------------------------------------------------------------------------------------

function H.progress(message)
  vim.notify(message, vim.log.levels.INFO)
end

function H.root()
  return require("agent.paths").root()
end

--- The hint for building by hand with cargo.
function H.by_hand_cargo(why)
  return ("%s: install Rust (https://rustup.rs), then run `cargo build --release` in %s and :Agent build cargo"):format(
    why,
    H.root()
  )
end

--- Runs `cmd` and calls `done(result)` on the main loop.
function H.run(cmd, opts, done)
  local ok, err = pcall(vim.system, cmd, vim.tbl_extend("force", { text = true }, opts or {}), function(result)
    vim.schedule(function()
      done(result)
    end)
  end)
  if not ok then
    vim.schedule(function()
      done({ code = -1, stdout = "", stderr = tostring(err) })
    end)
  end
end

--- The last line curl wrote to stderr ("curl: (22) The requested URL returned error: 404").
function H.curl_error(result)
  local lines = vim.split(vim.trim(result.stderr or ""), "\n")
  local last = lines[#lines]
  return (last and last ~= "") and last or ("curl exited with " .. tostring(result.code))
end

--- Fetches `url` into `path`; `done(nil)` on success, else `done(message, missing)` where
--- `missing` means the server has no such file (HTTP 404).
function H.fetch(url, path, done)
  H.run({
    "curl",
    "--fail",
    "--location",
    "--silent",
    "--show-error",
    -- Only HTTP(S), redirects included (GitHub redirects assets to its CDN).
    "--proto",
    "=https,http",
    "--proto-redir",
    "=https,http",
    "--connect-timeout",
    "20",
    -- A release binary is a few MB; a server sending more is not one.
    "--max-filesize",
    "200000000",
    "--retry",
    "2",
    "--output",
    path,
    url,
  }, {}, function(result)
    if result.code == 0 then
      return done(nil)
    end
    local err = H.curl_error(result)
    done(("could not download %s (%s)"):format(url, err), result.code == 22 and err:find("404", 1, true) ~= nil)
  end)
end

--- The sha256 of a file, by the first tool this machine has: `done(hex)` or `done(nil, why)`.
function H.sha256(path, done)
  local cmd
  if vim.fn.executable("sha256sum") == 1 then
    cmd = { "sha256sum", path }
  elseif vim.fn.executable("shasum") == 1 then
    cmd = { "shasum", "-a", "256", path }
  elseif vim.fn.executable("openssl") == 1 then
    cmd = { "openssl", "dgst", "-sha256", "-r", path }
  else
    return done(nil, "no sha256sum, shasum or openssl on PATH to check it with")
  end
  H.run(cmd, {}, function(result)
    local hex = result.code == 0 and (result.stdout or ""):match("^%s*(%x+)")
    if hex and #hex == 64 then
      return done(hex:lower())
    end
    done(nil, ("%s failed: %s"):format(cmd[1], vim.trim(result.stderr or "")))
  end)
end

--- Reads the first 64 hex digits of a `.sha256` file (`<hex>  <name>` or just `<hex>`).
function H.expected_sum(path)
  local fd = io.open(path, "r")
  if not fd then
    return nil
  end
  local text = fd:read("*a") or ""
  fd:close()
  local hex = text:match("^%s*(%x+)")
  return hex and #hex == 64 and hex:lower() or nil
end

--- Moves `from` to `to` as an executable (one rename, so a running Neovim never sees half a file),
--- then writes the record beside it. Returns nil or the error.
function H.install(from, record)
  local binary, record_path = M.paths()
  local ok, err = vim.uv.fs_chmod(from, 493) -- 0755
  if not ok then
    return ("could not make %s executable (%s)"):format(from, tostring(err))
  end
  ok, err = vim.uv.fs_rename(from, binary)
  if not ok then
    return ("could not move it to %s (%s)"):format(binary, tostring(err))
  end
  record.version = M.VERSION
  record.installed = os.date("!%Y-%m-%dT%H:%M:%SZ")
  local tmp = record_path .. ".tmp"
  local fd = io.open(tmp, "w")
  if fd then
    fd:write(vim.json.encode(record), "\n")
    fd:close()
    vim.uv.fs_rename(tmp, record_path)
  end
  return nil
end

--- A temporary name in bin/ (the same file system as the binary, so the rename is atomic).
function H.temp(suffix)
  local binary = M.paths()
  return ("%s.%d.%s"):format(binary, vim.uv.os_getpid(), suffix)
end

--- Makes bin/ when missing; nil, or why it cannot be written (a read-only plugin directory).
function H.bin_dir_problem()
  local dir = vim.fn.fnamemodify((M.paths()), ":h")
  local ok, err = pcall(vim.fn.mkdir, dir, "p")
  if vim.fn.isdirectory(dir) == 1 and vim.fn.filewritable(dir) == 2 then
    return nil
  end
  return ("agent: cannot write to %s (%s); put agent-nvim elsewhere and set `backend` in setup() to it"):format(
    dir,
    ok and "not a writable directory" or tostring(err)
  )
end

--- Downloads and installs the release binary; `done(ok, message, missing)`.
function H.download(done)
  local target, platform = M.target()
  if not target then
    return done(false, ("agent: no release binary for %s"):format(platform), true)
  end
  local asset = M.asset(target)
  local url = ("%s/v%s/%s"):format(M.base_url(), M.VERSION, asset)
  local binary = M.paths()
  local by_hand = ("download %s and %s.sha256 by hand, check it with `sha256sum -c`, and save it as %s (chmod +x); or build it: `cargo build --release` in %s"):format(
    url,
    url,
    binary,
    H.root()
  )
  if vim.fn.executable("curl") == 0 then
    return done(
      false,
      "agent: curl is not on PATH, so the backend cannot be downloaded; install curl and run :Agent build again, or "
        .. by_hand
    )
  end
  H.progress(("agent: downloading agent-nvim v%s for %s from %s"):format(M.VERSION, target, url))
  local sum_file, tmp = H.temp("sha256"), H.temp("download")
  local function fail(message, missing)
    os.remove(sum_file)
    os.remove(tmp)
    done(false, message, missing)
  end
  -- A fetch that failed: the release has no such file (missing), or the network failed.
  local function fetch_failed(err, missing)
    if missing then
      return fail(("agent: the release v%s has no binary for %s (%s)"):format(M.VERSION, target, err), true)
    end
    fail(("agent: %s; check the network and run :Agent build again, or %s"):format(err, by_hand))
  end
  H.fetch(url .. ".sha256", sum_file, function(err, missing)
    if err then
      return fetch_failed(err, missing)
    end
    local expected = H.expected_sum(sum_file)
    if not expected then
      return fail(("agent: %s.sha256 holds no sha256; nothing was installed; %s"):format(url, by_hand))
    end
    H.fetch(url, tmp, function(err2, missing2)
      if err2 then
        return fetch_failed(err2, missing2)
      end
      H.sha256(tmp, function(actual, why)
        if not actual then
          return fail(("agent: cannot check the download: %s; nothing was installed; %s"):format(why, by_hand))
        end
        if actual ~= expected then
          return fail(
            ("agent: the checksum of %s is wrong (expected %s, got %s); nothing was installed; run :Agent build again, or %s"):format(
              url,
              expected,
              actual,
              by_hand
            )
          )
        end
        os.remove(sum_file)
        local problem = H.install(tmp, { method = "download", target = target, url = url, sha256 = actual })
        if problem then
          return fail(("agent: %s; %s"):format(problem, by_hand))
        end
        done(
          true,
          ("agent: installed agent-nvim v%s for %s (downloaded, sha256 checked) at %s"):format(
            M.VERSION,
            target,
            binary
          )
        )
      end)
    end)
  end)
end

--- Builds with cargo and installs the result; `done(ok, message)`. `why` says why cargo is used
--- when it was not asked for.
function H.cargo(why, done)
  local root = H.root()
  -- "agent: <why>; <what happened>", one prefix for the whole message.
  local prefix = why and (why:gsub("^agent: ", "") .. "; ") or ""
  if vim.fn.executable("cargo") == 0 then
    return done(false, "agent: " .. prefix .. H.by_hand_cargo("cargo is not on PATH"))
  end
  H.progress(("agent: building the backend with `cargo build --release` in %s (this takes a few minutes)"):format(root))
  H.run({ "cargo", "build", "--release" }, { cwd = root }, function(result)
    if result.code ~= 0 then
      local lines = vim.split(vim.trim(result.stderr or ""), "\n")
      local tail = table.concat(vim.list_slice(lines, math.max(1, #lines - 5)), "\n")
      return done(
        false,
        ("agent: %s`cargo build --release` in %s failed (exit %d); run it there by hand to see why:\n%s"):format(
          prefix,
          root,
          result.code,
          tail
        )
      )
    end
    local built = require("agent.paths").built()
    local tmp = H.temp("build")
    local ok, err = vim.uv.fs_copyfile(built, tmp)
    if not ok then
      os.remove(tmp)
      return done(
        false,
        ("agent: %scargo finished but %s cannot be copied (%s); run `cargo build --release` in %s by hand"):format(
          prefix,
          built,
          tostring(err),
          root
        )
      )
    end
    local problem = H.install(tmp, { method = "cargo" })
    if problem then
      os.remove(tmp)
      return done(false, ("agent: %s%s; the build is at %s"):format(prefix, problem, built))
    end
    done(
      true,
      ("agent: %sbuilt agent-nvim v%s with cargo and installed it at %s"):format(prefix, M.VERSION, (M.paths()))
    )
  end)
end

return M
