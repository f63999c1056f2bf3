//! What a Responses request's chat form would tell the pipeline (the estimate's shape, the
//! capabilities it needs, its end user), counted from the request's members without building
//! the form. perf: a deployment that speaks the Responses API never reads the chat form, and for
//! a coding agent's 50 kB body building and checking it cost 190 µs natively on every request.
//!
//! The members are read into [`RequestFields`] (by `endpoints::responses_body`, in one walk over
//! the bytes); [`RequestFields::facts`] then follows [`super::request::to_chat`]'s rules item by
//! item. It answers `None` wherever the form or its checks could refuse the request or a part is
//! not plainly valid; the caller then builds the form, whose checks answer as they always did.

use super::request::LEFT_OUT;
use serde_json::Value;

/// The facts of a request whose chat form builds and passes the chat checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatFacts {
    /// Characters the estimate counts (`ChatRequest::text_chars` of the form).
    pub text_chars: usize,
    /// The form's messages (a call joins the assistant message before it).
    pub messages: usize,
    /// `max_output_tokens`, the form's `max_tokens`.
    pub max_output: Option<u64>,
    /// Tools offered, or tool calls or results in the history.
    pub tools: bool,
    /// `text.format` asks for JSON.
    pub json_mode: bool,
    /// A user message holds an image.
    pub vision: bool,
    /// `user`, else `safety_identifier`, when a string.
    pub user: Option<String>,
}

/// A member as the rules read it: a string kept as `S` (its text, or its characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Field<S = String> {
    #[default]
    Absent,
    Null,
    Bool(bool),
    /// A number: `Some` when it is a non-negative integer (`Value::as_u64`).
    Number(Option<u64>),
    Str(S),
    Array,
    Object,
}

impl<S> Field<S> {
    /// Present and not null.
    pub fn is_set(&self) -> bool {
        !matches!(self, Field::Absent | Field::Null)
    }

    pub fn as_str(&self) -> Option<&S> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The request's members the rules read.
#[derive(Debug, Default)]
pub struct RequestFields {
    pub model: Field,
    pub stream: Field<usize>,
    pub previous_response_id: Field<usize>,
    pub conversation: Field<usize>,
    pub background: Field<usize>,
    pub instructions: Field<usize>,
    pub input: Input,
    pub tools: ToolList,
    pub tool_choice: Option<Value>,
    pub text: Option<Value>,
    pub temperature: Field<usize>,
    pub top_p: Field<usize>,
    pub max_output_tokens: Field<usize>,
    pub user: Field,
    pub safety_identifier: Field,
    pub prompt_cache_key: Field,
    pub metadata: Option<Value>,
}

/// `input`: a string, or the history its items make.
#[derive(Debug, Default)]
pub enum Input {
    #[default]
    Absent,
    Null,
    /// A string: one user message of these characters.
    Text(usize),
    Items(History),
    Other,
}

impl RequestFields {
    /// The form's facts, or `None` where only building it can tell (see the module's doc).
    pub fn facts(&self) -> Option<ChatFacts> {
        self.model.as_str().filter(|m| !m.is_empty())?;
        if self.previous_response_id.is_set() || self.conversation.is_set() || self.background == Field::Bool(true) {
            return None;
        }
        let mut f = ChatFacts::default();
        match &self.instructions {
            Field::Str(n) if *n > 0 => (f.messages, f.text_chars) = (1, *n),
            Field::Str(_) | Field::Null | Field::Absent => {}
            _ => return None,
        }
        let history = match &self.input {
            Input::Text(n) => History { messages: 1, text_chars: *n, ..History::default() },
            Input::Items(history) if history.plain => history.clone(),
            _ => return None,
        };
        f.messages += history.messages;
        f.text_chars += history.text_chars;
        (f.tools, f.vision) = (history.tools, history.vision);
        if f.messages == 0 {
            return None;
        }
        let ToolList::Tools(tools) = &self.tools else { return None };
        if !tools.plain {
            return None;
        }
        f.text_chars += tools.chars;
        f.tools |= tools.functions > 0;
        if self.tool_choice.as_ref().filter(|v| !v.is_null()).is_some_and(|choice| !tools.plain_choice(choice)) {
            return None;
        }
        if [&self.temperature, &self.top_p].iter().any(|v| v.is_set() && !matches!(v, Field::Number(_))) {
            return None;
        }
        if self.max_output_tokens.is_set() {
            let Field::Number(Some(n @ 1..)) = self.max_output_tokens else { return None };
            f.max_output = Some(n);
        }
        let user = if self.user == Field::Absent { &self.safety_identifier } else { &self.user };
        f.user = user.as_str().cloned();
        let format = self.text.as_ref().and_then(|t| t.get("format")).and_then(super::request::response_format);
        if let Some(format) = format {
            // A schema's checks and characters are the form's to tell.
            if format["type"] != "json_object" {
                return None;
            }
            f.json_mode = true;
        }
        Some(f)
    }
}

/// The chat messages a list of input items makes, counted in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    pub messages: usize,
    pub text_chars: usize,
    /// A function call or its output: the history needs tools.
    pub tools: bool,
    /// A user message holds an image.
    pub vision: bool,
    /// Every item so far translates without a refusal.
    pub plain: bool,
    /// The last message is an assistant's, which a function call joins.
    assistant_last: bool,
}

impl Default for History {
    fn default() -> Self {
        History { messages: 0, text_chars: 0, tools: false, vision: false, plain: true, assistant_last: false }
    }
}

/// An input item's members (`Absent` for an item that is not an object).
#[derive(Debug, Default)]
pub struct ItemFields {
    pub kind: Field,
    pub role: Field,
    pub content: Content,
    pub call_id: Field<usize>,
    pub name: Field<usize>,
    pub arguments: Field<usize>,
    pub output: Output,
}

/// A message's `content`.
#[derive(Debug, Default)]
pub enum Content {
    Text(usize),
    Parts(Parts),
    /// Absent, or neither a string nor an array: refused.
    #[default]
    Other,
}

/// A message's content parts, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub chars: usize,
    pub image: bool,
    /// Every part translates without a refusal.
    pub plain: bool,
}

impl Default for Parts {
    fn default() -> Self {
        Parts { chars: 0, image: false, plain: true }
    }
}

/// A content part's members (`Absent` for a part that is not an object).
#[derive(Debug, Default)]
pub struct PartFields {
    pub kind: Field,
    pub text: Field<usize>,
    pub refusal: Field<usize>,
    pub image_url: Field<usize>,
}

impl Parts {
    /// One part, as `request::content` translates it.
    pub fn add(&mut self, part: &PartFields) {
        let kind = part.kind.as_str().map_or("", String::as_str);
        let text = if part.text == Field::Absent { &part.refusal } else { &part.text };
        match (kind, text.as_str()) {
            ("input_text" | "output_text" | "text" | "refusal", Some(n)) => self.chars += n,
            ("input_image", _) if part.image_url.as_str().is_some() => self.image = true,
            _ => self.plain = false,
        }
    }
}

/// A function call's output: a string, or parts whose texts are joined.
#[derive(Debug, Default)]
pub enum Output {
    Text(usize),
    Parts(usize),
    #[default]
    Other,
}

impl History {
    fn message(&mut self, role: &str, text_chars: usize) {
        self.messages += 1;
        self.text_chars += text_chars;
        self.assistant_last = role == "assistant";
    }

    /// One input item, as `request::add_item` translates it.
    pub fn add(&mut self, item: &ItemFields) {
        if self.plain && self.item(item).is_none() {
            self.plain = false;
        }
    }

    fn item(&mut self, item: &ItemFields) -> Option<()> {
        let kind = match item.kind.as_str() {
            Some(kind) => kind.as_str(),
            // An "easy" input message carries a role and no type.
            None if item.role != Field::Absent => "message",
            None => "",
        };
        match kind {
            "message" => {
                let role = match item.role.as_str()?.as_str() {
                    "user" => "user",
                    "assistant" => "assistant",
                    "system" | "developer" => "system",
                    _ => return None,
                };
                let text_chars = match &item.content {
                    Content::Text(n) => *n,
                    Content::Parts(parts) if parts.plain => {
                        self.vision |= parts.image && role == "user";
                        parts.chars
                    }
                    _ => return None,
                };
                self.message(role, text_chars);
            }
            "function_call" => {
                item.call_id.as_str()?;
                let name = item.name.as_str()?;
                // A call without arguments is sent with "{}".
                self.text_chars += name + item.arguments.as_str().copied().unwrap_or(2);
                self.tools = true;
                if !self.assistant_last {
                    self.message("assistant", 0);
                }
            }
            "function_call_output" => {
                item.call_id.as_str()?;
                let (Output::Text(n) | Output::Parts(n)) = item.output else { return None };
                self.tools = true;
                self.message("tool", n);
            }
            // Left out of the form; anything else refuses it.
            kind if LEFT_OUT.contains(&kind) => {}
            _ => return None,
        }
        Some(())
    }
}

/// `tools`: absent or null is no tools.
#[derive(Debug)]
pub enum ToolList {
    Tools(Tools),
    /// Neither an array nor null: refused.
    Other,
}

impl Default for ToolList {
    fn default() -> Self {
        ToolList::Tools(Tools::default())
    }
}

/// A tool's members (`Absent` for a tool that is not an object).
#[derive(Debug, Default)]
pub struct ToolFields {
    pub kind: Field,
    pub name: Field,
    pub description: Field<usize>,
    /// `parameters`, with the characters of its compact JSON text when it is an object.
    pub parameters: Field<usize>,
    pub parameters_chars: usize,
}

/// The request's tools as the form translates them: function tools kept, the others dropped.
#[derive(Debug)]
pub struct Tools {
    pub functions: usize,
    /// Characters of the function tools' names, descriptions and parameter schemas.
    pub chars: usize,
    /// `kind:name` (or `kind`) of each dropped tool, as `request::tools` names them.
    pub dropped: Vec<String>,
    pub plain: bool,
}

impl Default for Tools {
    fn default() -> Self {
        Tools { functions: 0, chars: 0, dropped: Vec::new(), plain: true }
    }
}

impl Tools {
    /// One tool, as `request::tools` translates it.
    pub fn add(&mut self, tool: &ToolFields) {
        let name = tool.name.as_str();
        let kind = tool.kind.as_str().map_or("", String::as_str);
        if kind != "function" {
            self.dropped.push(name.map_or_else(|| kind.to_string(), |name| format!("{kind}:{name}")));
            return;
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            self.plain = false;
            return;
        };
        self.chars += name.chars().count();
        match tool.description {
            Field::Str(n) => self.chars += n,
            Field::Null | Field::Absent => {}
            _ => self.plain = false,
        }
        match tool.parameters {
            Field::Object => self.chars += tool.parameters_chars,
            Field::Null | Field::Absent => {}
            _ => self.plain = false,
        }
        self.functions += 1;
    }

    /// Whether `tool_choice` translates without a refusal (`request::tool_choice`'s rules).
    fn plain_choice(&self, choice: &Value) -> bool {
        match choice {
            Value::String(s) => s == "none" || s == "auto" || (s == "required" && self.functions > 0),
            Value::Object(o) => {
                o.get("type").and_then(Value::as_str) == Some("function")
                    && o.get("name").and_then(Value::as_str).is_some_and(|name| {
                        let named = format!(":{name}");
                        !self.dropped.iter().any(|d| d.ends_with(&named))
                    })
            }
            _ => false,
        }
    }
}
