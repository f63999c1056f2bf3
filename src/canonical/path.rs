//! Where a value sits in a request body, built as the walk goes and rendered only for an error.

#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    /// As OpenAI names a parameter: `messages[0].content[1].image_url.url`.
    pub fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Key(Path::Root, key) => key.to_string(),
            Path::Key(parent, key) => format!("{}.{key}", parent.render()),
            Path::Index(parent, i) => format!("{}[{i}]", parent.render()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_keys_and_indexes_as_openai_names_params() {
        let root = Path::Root;
        let messages = root.key("messages");
        let first = messages.index(0);
        let content = first.key("content");
        assert_eq!(content.index(1).key("image_url").key("url").render(), "messages[0].content[1].image_url.url");
        assert_eq!(root.key("model").render(), "model");
        assert_eq!(root.render(), "");
    }
}
