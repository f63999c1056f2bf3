//! The capability gate: a deployment that declares it lacks what the request needs (tools, JSON
//! mode, vision, context window) is skipped; an undeclared capability passes with a warning.

use crate::canonical::{ChatFacts, ChatRequest};
use crate::config::routes::Capabilities;

/// What a request needs from a deployment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub tools: bool,
    pub json_mode: bool,
    pub vision: bool,
    /// Estimated prompt tokens plus the output budget.
    pub context_tokens: u64,
}

impl Needs {
    /// [`Needs::of`], from the facts the door read.
    pub fn of_facts(f: &ChatFacts) -> Needs {
        Needs { tools: f.tools, json_mode: f.json_mode, vision: f.vision, context_tokens: 0 }
    }

    /// What a chat-shaped request asks of a deployment (the context size is not estimated here).
    pub fn of(chat: &ChatRequest) -> Needs {
        Needs {
            tools: chat.needs_tools(),
            json_mode: chat.needs_json(),
            vision: chat.needs_vision(),
            context_tokens: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Pass,
    /// Passes, but these capabilities are not declared (unknown is not unsupported).
    PassUnknown(Vec<&'static str>),
    /// Skipped: these needs are declared unsupported.
    Skip(Vec<&'static str>),
}

pub fn gate(caps: &Capabilities, needs: &Needs) -> Gate {
    let mut missing = Vec::new();
    let mut unknown = Vec::new();
    let mut check = |needed: bool, declared: Option<bool>, name: &'static str| match (needed, declared) {
        (true, Some(false)) => missing.push(name),
        (true, None) => unknown.push(name),
        _ => {}
    };
    check(needs.tools, caps.tools, "tools");
    check(needs.json_mode, caps.json_mode, "json_mode");
    check(needs.vision, caps.vision, "vision");
    match caps.context_window {
        Some(window) if needs.context_tokens > u64::from(window) => missing.push("context_window"),
        None if needs.context_tokens > 0 => unknown.push("context_window"),
        _ => {}
    }
    if !missing.is_empty() {
        Gate::Skip(missing)
    } else if unknown.is_empty() {
        Gate::Pass
    } else {
        Gate::PassUnknown(unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(tools: Option<bool>, window: Option<u32>) -> Capabilities {
        Capabilities { tools, context_window: window, ..Capabilities::default() }
    }

    #[test]
    fn gate_skips_declared_unsupported_and_passes_unknown() {
        let needs = Needs { tools: true, context_tokens: 100, ..Needs::default() };
        assert_eq!(gate(&caps(Some(true), Some(1000)), &needs), Gate::Pass);
        assert_eq!(gate(&caps(Some(false), Some(1000)), &needs), Gate::Skip(vec!["tools"]));
        assert_eq!(gate(&caps(None, Some(1000)), &needs), Gate::PassUnknown(vec!["tools"]));
        assert_eq!(gate(&caps(Some(true), Some(50)), &needs), Gate::Skip(vec!["context_window"]));
        assert_eq!(gate(&caps(Some(true), None), &needs), Gate::PassUnknown(vec!["context_window"]));
        let plain = Needs::default();
        assert_eq!(gate(&caps(Some(false), Some(1)), &plain), Gate::Pass);
        let vision = Needs { vision: true, json_mode: true, ..Needs::default() };
        let declared = Capabilities { vision: Some(false), json_mode: Some(false), ..Capabilities::default() };
        assert_eq!(gate(&declared, &vision), Gate::Skip(vec!["json_mode", "vision"]));
    }
}
