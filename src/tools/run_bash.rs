//! run_bash (stub: being written).

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{Args, Tool, ToolContext, ToolResult};

/// Runs a shell command in the workspace root.
pub struct RunBash;

impl Tool for RunBash {
    fn name(&self) -> &'static str {
        "run_bash"
    }
    fn description(&self) -> &'static str {
        "Run a shell command in the workspace root."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
    }
    fn mutating(&self) -> bool {
        true
    }
    fn run<'a>(
        &'a self,
        args: Args<'a>,
        _cx: &'a ToolContext,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            match args.required("command") {
                Err(fail) => fail,
                Ok(_) => ToolResult::fail("run_bash: not yet"),
            }
        })
    }
}
