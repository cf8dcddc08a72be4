//! The lexical shape of PTX text, shared by the manifest checker (does the module define the
//! entry, with which parameters) and the predictor (what its body does): comments removed, and
//! each `.entry` with its parameter list and body found whatever the layout, so both read a
//! module the same way. A leaf: it knows nothing of kernels or models.

/// One `.entry` of a module (in comment-free text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub name: &'a str,
    /// The text between the parentheses of its parameter list (empty without one).
    pub params: &'a str,
    /// The text between the braces of its body; `None` when there is no balanced body.
    pub body: Option<&'a str>,
}

/// The text with `//` and `/* */` comments blanked out (PTX has no string literals), so a
/// commented-out instruction, brace or entry is neither counted nor taken for code.
pub fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = rest[b + 2..]
                    .find("*/")
                    .map_or("", |e| &rest[b + 2 + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// A PTX identifier's characters after the first: letters, digits, `_` and `$`.
pub fn identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Every `.entry` of comment-free `text`, in order: a whole directive followed by white space
/// and the name, matched whole (`k` is not `k$1`), then its parameters and body however they
/// are laid out (a brace on the signature's line or on its own).
pub fn entries(text: &str) -> Vec<Entry<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(".entry") {
        let after = from + at + ".entry".len();
        from = after;
        if !text[after..].starts_with(char::is_whitespace) {
            continue;
        }
        let name_at = text.len() - text[after..].trim_start().len();
        let len = text[name_at..]
            .find(|c: char| !identifier_char(c))
            .unwrap_or(text.len() - name_at);
        if len == 0 {
            continue;
        }
        let (params, body_from) = params_after(text, name_at + len);
        found.push(Entry {
            name: &text[name_at..name_at + len],
            params,
            body: body_after(text, body_from),
        });
    }
    found
}

/// The parameter list starting at `at` (after white space), and where the text after it starts.
fn params_after(text: &str, at: usize) -> (&str, usize) {
    let rest = text[at..].trim_start();
    let open = text.len() - rest.len();
    match rest.strip_prefix('(').and_then(|r| r.find(')')) {
        Some(close) => (&text[open + 1..open + 1 + close], open + 1 + close + 1),
        None => ("", at),
    }
}

/// The body whose `{` is the first after `at`, up to its balancing `}`.
fn body_after(text: &str, at: usize) -> Option<&str> {
    let rest = &text[at..];
    // The next thing must be the body, not another directive's text.
    if !rest.trim_start().starts_with('{') {
        return None;
    }
    let open = at + rest.find('{')?;
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_whatever_the_layout() {
        let ptx = "// .entry ghost(.param .u64 g)\n.visible .entry k$1 (.param .u64 a, /* b, */ .param .u32 n) {\n ret; }\n.entry k\n(\n.param .u64 a\n)\n{ { ret; } }\n.entry bare;\n";
        let text = without_comments(ptx);
        let found = entries(&text);
        let names: Vec<&str> = found.iter().map(|e| e.name).collect();
        assert_eq!(names, ["k$1", "k", "bare"]);
        assert_eq!(found[0].params.split(',').count(), 2);
        assert_eq!(found[0].body.map(str::trim), Some("ret;"));
        assert_eq!(found[1].params.trim(), ".param .u64 a");
        assert_eq!(found[1].body.map(str::trim), Some("{ ret; }"));
        assert_eq!(found[2].body, None);
    }
}
