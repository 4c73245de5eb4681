//! What the agent knows of each model: its context window, its prices, whether it thinks, and
//! how the person tuned it (thinking budget, reasoning effort, the OpenAI wire format).
//!
//! The built-in table names current Anthropic and OpenAI models; `setup({ models = { [name] =
//! { context = N, price = { ... } } } })` adds models or overrides their entries. A name matches
//! an entry when it is the entry's name, or that name followed by a release date or `-latest`
//! (`claude-sonnet-4-5-20250929`): never by a looser prefix, since a variant (`gpt-5-pro`) can
//! cost ten times its family's price, and a wrong cost is worse than none.

use std::collections::BTreeMap;

use super::{ProviderKind, Usage};

/// The context window assumed for a model the table does not know.
pub const DEFAULT_CONTEXT: u64 = 128_000;

/// The window sent to Ollama for a model the table does not know: Ollama sets aside memory for
/// all of it, so a large guess can keep a local model from loading. `models[name].context`
/// sets it.
pub const DEFAULT_LOCAL_CONTEXT: u64 = 32_768;

/// The thinking budget a thinking model gets when `thinking` is not set.
pub const DEFAULT_THINKING_BUDGET: u32 = 8_000;

/// The smallest budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: u32 = 1_024;

/// Dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input not read from or written to the cache.
    pub input: f64,
    /// Output (thinking included).
    pub output: f64,
    /// Input written to the prompt cache.
    pub cache_write: f64,
    /// Input read from the prompt cache.
    pub cache_read: f64,
}

impl Price {
    /// What `usage` costs, in dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let plain = usage
            .input
            .saturating_sub(usage.cache_read)
            .saturating_sub(usage.cache_write);
        (plain as f64 * self.input
            + usage.output as f64 * self.output
            + usage.cache_write as f64 * self.cache_write
            + usage.cache_read as f64 * self.cache_read)
            / 1_000_000.0
    }
}

/// How a model is sent requests and counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInfo {
    /// Its context window in tokens.
    pub context: u64,
    /// Its prices; None when unknown (no cost is shown then).
    pub price: Option<Price>,
    /// Anthropic extended thinking is on by default for it.
    pub thinks: bool,
    /// OpenAI serves it through the Responses API only.
    pub responses_only: bool,
    /// The table knows it (or the person's entry names it).
    pub known: bool,
    /// The most output tokens one response may hold, when known.
    pub max_output: Option<u32>,
    /// It takes images in prompts (false only for a model known not to: a prompt with images
    /// is refused before it is sent).
    pub images: bool,
}

/// One entry of the person's `models` table: each field overrides the built-in one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelEntry {
    /// The context window, in tokens.
    pub context: Option<u64>,
    /// The prices.
    pub price: Option<Price>,
    /// Whether it takes images (`models[name].images = false` for a local model that does
    /// not).
    pub images: Option<bool>,
}

/// `thinking` in setup(): the Anthropic thinking budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Thinking {
    /// The table's choice: [`DEFAULT_THINKING_BUDGET`] for a model that thinks, else off.
    #[default]
    Auto,
    /// Never (`thinking = false`).
    Off,
    /// This many tokens (`thinking = { budget = N }`).
    Budget(u32),
}

/// Which of OpenAI's two wire formats a request uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OpenAiApi {
    /// Chat Completions, or the Responses API for a model served only there.
    #[default]
    Auto,
    /// `POST {base}/chat/completions`.
    Chat,
    /// `POST {base}/responses`.
    Responses,
}

impl OpenAiApi {
    /// Parses `chat` or `responses`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "chat" | "chat_completions" => Some(OpenAiApi::Chat),
            "responses" => Some(OpenAiApi::Responses),
            _ => None,
        }
    }
}

/// The person's tuning of the models: setup()'s `thinking`, `reasoning`, `openai.api` and
/// `models`, or the terminal's flags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tuning {
    /// The Anthropic thinking budget.
    pub thinking: Thinking,
    /// OpenAI's `reasoning_effort` (`low`, `medium`, `high`); None: not sent.
    pub effort: Option<String>,
    /// OpenAI's wire format.
    pub api: OpenAiApi,
    /// Entries by model name, over the built-in table.
    pub models: BTreeMap<String, ModelEntry>,
}

impl Tuning {
    /// What is known of `model`: the person's entry over the built-in one over the defaults.
    pub fn model(&self, model: &str) -> ModelInfo {
        let known = KNOWN
            .iter()
            .filter(|k| names(k.name, model))
            .max_by_key(|k| k.name.len());
        let entry = self
            .models
            .iter()
            .filter(|(name, _)| names(name, model))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, entry)| entry);
        ModelInfo {
            context: entry
                .and_then(|e| e.context)
                .or(known.map(|k| k.context))
                .unwrap_or(DEFAULT_CONTEXT)
                .max(1),
            price: entry.and_then(|e| e.price).or(known.map(|k| k.price)),
            thinks: known.is_some_and(|k| k.thinks),
            responses_only: known.is_some_and(|k| k.responses_only),
            known: known.is_some() || entry.is_some(),
            max_output: known.and_then(|k| k.max_output),
            images: entry
                .and_then(|e| e.images)
                .unwrap_or_else(|| !TEXT_ONLY.iter().any(|name| names(name, model))),
        }
    }

    /// The thinking budget for `model`, when thinking is on for it.
    pub fn thinking_budget(&self, model: &str) -> Option<u32> {
        match self.thinking {
            Thinking::Off => None,
            // Never to a model known not to think (the API refuses it).
            Thinking::Budget(_) if self.known_not_to_think(model) => None,
            Thinking::Budget(n) => Some(n.max(MIN_THINKING_BUDGET)),
            Thinking::Auto => self.model(model).thinks.then_some(DEFAULT_THINKING_BUDGET),
        }
    }

    fn known_not_to_think(&self, model: &str) -> bool {
        KNOWN
            .iter()
            .any(|k| names(k.name, model) && k.max_output.is_some() && !k.thinks)
    }

    /// Whether requests for `model` use the Responses API.
    pub fn responses(&self, model: &str) -> bool {
        match self.api {
            OpenAiApi::Chat => false,
            OpenAiApi::Responses => true,
            OpenAiApi::Auto => self.model(model).responses_only,
        }
    }
}

/// `name` is `entry`, or `entry` followed by a release date (`-20250929`, `-2025-08-07`) or
/// `-latest`: nothing looser (`claude-opus-4-6-20260101` is not `claude-opus-4`).
fn names(entry: &str, name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match name.strip_prefix(entry) {
        Some("") | Some("-latest") => true,
        Some(rest) => match rest.strip_prefix('-') {
            Some(date) if date.len() == 8 => digits(date),
            Some(date) if date.len() == 10 => {
                let parts: Vec<&str> = date.split('-').collect();
                parts.len() == 3
                    && [4, 2, 2] == [parts[0].len(), parts[1].len(), parts[2].len()]
                    && parts.iter().all(|p| digits(p))
            }
            _ => false,
        },
        None => false,
    }
}

/// The names of the built-in table's entries for `kind`, newest first: what `:Agent model`
/// offers (Ollama's models are the local server's, so none).
pub fn offered(kind: ProviderKind) -> Vec<String> {
    KNOWN
        .iter()
        .filter(|k| k.provider == kind)
        .map(|k| k.name.to_string())
        .collect()
}

/// A built-in entry.
struct Known {
    provider: ProviderKind,
    name: &'static str,
    context: u64,
    price: Price,
    thinks: bool,
    responses_only: bool,
    max_output: Option<u32>,
}

const fn anthropic(
    name: &'static str,
    input: f64,
    output: f64,
    thinks: bool,
    max_output: u32,
) -> Known {
    Known {
        provider: ProviderKind::Anthropic,
        name,
        context: 200_000,
        max_output: Some(max_output),
        // Anthropic bills a 5-minute cache write at 1.25 times input and a read at a tenth.
        price: Price {
            input,
            output,
            cache_write: input * 1.25,
            cache_read: input / 10.0,
        },
        thinks,
        responses_only: false,
    }
}

const fn openai(
    name: &'static str,
    context: u64,
    input: f64,
    cached: f64,
    output: f64,
    responses_only: bool,
) -> Known {
    Known {
        provider: ProviderKind::OpenAi,
        name,
        context,
        // OpenAI does not bill cache writes apart from input.
        price: Price {
            input,
            output,
            cache_write: input,
            cache_read: cached,
        },
        thinks: false,
        responses_only,
        max_output: None,
    }
}

/// Models known to read text only: a prompt with images is refused before it reaches them.
/// Every model of [`KNOWN`] takes images.
const TEXT_ONLY: &[&str] = &[
    "gpt-3.5-turbo",
    "gpt-4",
    "o1-mini",
    "o3-mini",
    "codex-mini-latest",
];

/// Current models, their windows and list prices (USD per million tokens) as the vendors
/// publish them.
const KNOWN: &[Known] = &[
    anthropic("claude-opus-4-5", 5.0, 25.0, true, 64_000),
    anthropic("claude-opus-4-1", 15.0, 75.0, true, 32_000),
    anthropic("claude-opus-4", 15.0, 75.0, true, 32_000),
    anthropic("claude-sonnet-4-5", 3.0, 15.0, true, 64_000),
    anthropic("claude-sonnet-4", 3.0, 15.0, true, 64_000),
    anthropic("claude-3-7-sonnet", 3.0, 15.0, true, 64_000),
    anthropic("claude-haiku-4-5", 1.0, 5.0, true, 64_000),
    anthropic("claude-3-5-haiku", 0.8, 4.0, false, 8_192),
    openai("gpt-5.1", 400_000, 1.25, 0.125, 10.0, false),
    openai("gpt-5", 400_000, 1.25, 0.125, 10.0, false),
    openai("gpt-5-mini", 400_000, 0.25, 0.025, 2.0, false),
    openai("gpt-5-nano", 400_000, 0.05, 0.005, 0.4, false),
    openai("gpt-5-codex", 400_000, 1.25, 0.125, 10.0, true),
    openai("gpt-5.1-codex", 400_000, 1.25, 0.125, 10.0, true),
    openai("gpt-5-pro", 400_000, 15.0, 15.0, 120.0, true),
    openai("gpt-4.1", 1_047_576, 2.0, 0.5, 8.0, false),
    openai("gpt-4.1-mini", 1_047_576, 0.4, 0.1, 1.6, false),
    openai("gpt-4o", 128_000, 2.5, 1.25, 10.0, false),
    // The first gpt-4o snapshot kept its launch price.
    openai("gpt-4o-2024-05-13", 128_000, 5.0, 5.0, 15.0, false),
    openai("gpt-4o-mini", 128_000, 0.15, 0.075, 0.6, false),
    openai("o3", 200_000, 2.0, 0.5, 8.0, false),
    openai("o4-mini", 200_000, 1.1, 0.275, 4.4, false),
    openai("o3-pro", 200_000, 20.0, 20.0, 80.0, true),
];

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_is_offered_its_own_entries_of_the_table() {
        let anthropic = offered(ProviderKind::Anthropic);
        assert!(
            anthropic.iter().all(|m| m.starts_with("claude-")),
            "{anthropic:?}"
        );
        assert!(anthropic.contains(&ProviderKind::Anthropic.default_model().to_string()));
        assert!(anthropic.contains(&"claude-opus-4-5".to_string()));
        let openai = offered(ProviderKind::OpenAi);
        assert!(
            !openai.iter().any(|m| m.starts_with("claude-")),
            "{openai:?}"
        );
        assert!(openai.contains(&ProviderKind::OpenAi.default_model().to_string()));
        assert!(openai.contains(&"o3".to_string()));
        assert_eq!(offered(ProviderKind::Ollama), Vec::<String>::new());
    }

    #[test]
    fn a_dated_name_finds_its_entry_and_a_variant_does_not_borrow_its_familys_price() {
        let tuning = Tuning::default();
        let sonnet = tuning.model("claude-sonnet-4-5-20250929");
        assert_eq!(sonnet.context, 200_000);
        assert_eq!(sonnet.price.unwrap().input, 3.0);
        assert!(sonnet.thinks);
        assert_eq!(tuning.model("gpt-5-2025-08-07").price.unwrap().input, 1.25);
        assert_eq!(tuning.model("gpt-5-mini").price.unwrap().input, 0.25);
        // Unknown variants and local models: the default window, no price.
        for name in [
            "gpt-5-turbo-preview",
            "qwen3-coder",
            "claude-sonnet-4-5-fast",
        ] {
            let info = tuning.model(name);
            assert_eq!(
                (info.context, info.price),
                (DEFAULT_CONTEXT, None),
                "{name}"
            );
        }
        assert!(tuning.model("gpt-5-codex").responses_only);
        // A later model whose name starts like an older one's is not priced as it.
        for name in [
            "claude-opus-4-6-20260101",
            "claude-sonnet-4-7",
            "gpt-4o-2024-5-13",
        ] {
            assert_eq!(tuning.model(name).price, None, "{name}");
        }
        assert_eq!(tuning.model("gpt-4o-2024-05-13").price.unwrap().input, 5.0);
        assert_eq!(
            tuning.model("claude-opus-4-1-20250805").max_output,
            Some(32_000)
        );
    }

    #[test]
    fn the_persons_entry_overrides_the_table_field_by_field() {
        let mut tuning = Tuning::default();
        tuning.models.insert(
            "claude-sonnet-4-5".into(),
            ModelEntry {
                context: Some(1_000_000),
                price: None,
                images: None,
            },
        );
        let price = Price {
            input: 1.0,
            output: 2.0,
            cache_write: 0.0,
            cache_read: 0.0,
        };
        tuning.models.insert(
            "my-model".into(),
            ModelEntry {
                context: None,
                price: Some(price),
                images: None,
            },
        );
        let sonnet = tuning.model("claude-sonnet-4-5");
        assert_eq!(sonnet.context, 1_000_000);
        assert_eq!(sonnet.price.unwrap().output, 15.0);
        let mine = tuning.model("my-model");
        assert_eq!((mine.context, mine.price), (DEFAULT_CONTEXT, Some(price)));
    }

    #[test]
    fn cost_bills_each_kind_of_input_at_its_own_price() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_write: 3.75,
            cache_read: 0.3,
        };
        let usage = Usage {
            input: 1_000_000,
            output: 100_000,
            cache_read: 600_000,
            cache_write: 200_000,
        };
        // 200k plain × 3 + 200k written × 3.75 + 600k read × 0.3 + 100k out × 15, per million.
        let expected = 0.6 + 0.75 + 0.18 + 1.5;
        assert!((price.cost(&usage) - expected).abs() < 1e-9);
    }

    #[test]
    fn thinking_is_on_for_thinking_models_unless_turned_off_and_a_budget_is_at_least_the_minimum() {
        let mut tuning = Tuning::default();
        assert_eq!(
            tuning.thinking_budget("claude-sonnet-4-5"),
            Some(DEFAULT_THINKING_BUDGET)
        );
        assert_eq!(tuning.thinking_budget("claude-3-5-haiku"), None);
        assert_eq!(tuning.thinking_budget("test-model"), None);
        tuning.thinking = Thinking::Off;
        assert_eq!(tuning.thinking_budget("claude-sonnet-4-5"), None);
        tuning.thinking = Thinking::Budget(100);
        assert_eq!(
            tuning.thinking_budget("test-model"),
            Some(MIN_THINKING_BUDGET)
        );
        // Never to a model known not to think.
        assert_eq!(tuning.thinking_budget("claude-3-5-haiku-20241022"), None);
    }
}
