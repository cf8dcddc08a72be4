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

/// The text with `//` and `/* */` comments blanked out, string literals (`.file`, `.pragma`)
/// kept whole, so a commented-out instruction, brace or entry is neither counted nor taken for
/// code, and a `/*` inside a file name is not a comment.
pub fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut chars = ptx.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (c, chars.peek().map(|&(_, n)| n)) {
            ('"', _) => {
                out.push(c);
                for (_, s) in chars.by_ref() {
                    out.push(s);
                    if s == '"' {
                        break;
                    }
                }
            }
            ('/', Some('/')) => {
                // To the end of the line, which stays.
                while chars.peek().is_some_and(|&(_, n)| n != '\n') {
                    chars.next();
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let rest = &ptx[i + 2..];
                let end = rest.find("*/").map_or(ptx.len(), |e| i + 2 + e + 2);
                while chars.peek().is_some_and(|&(j, _)| j < end) {
                    chars.next();
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// A PTX identifier's characters after the first: letters, digits, `_` and `$`.
pub fn identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Every `.entry` of comment-free `text`, in order: a whole directive followed by white space
/// and the name, matched whole (`k` is not `k$1`), then its parameters and body however they
/// are laid out (a brace on the signature's line or on its own, performance directives such as
/// `.maxntid` between them).
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
        let body = body_after(text, body_from);
        found.push(Entry {
            name: &text[name_at..name_at + len],
            params,
            body: body.ok().flatten(),
        });
        match body {
            // Whatever follows is inside a body that never closes: no entry of its own.
            Err(Unbalanced) => break,
            // Past the body: nothing in it is an entry.
            Ok(Some(b)) => from = b.as_ptr() as usize - text.as_ptr() as usize + b.len(),
            Ok(None) => {}
        }
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

/// A body whose braces never balance.
#[derive(Debug, Clone, Copy)]
struct Unbalanced;

/// The body whose `{` follows `at` (after any directives, such as `.maxntid 256, 1, 1`), up to
/// its balancing `}`; `None` for a declaration (a `;` first, or the next function's text).
fn body_after(text: &str, at: usize) -> Result<Option<&str>, Unbalanced> {
    let rest = &text[at..];
    let Some(stop) = rest.find(['{', ';']) else {
        return Ok(None);
    };
    let between = &rest[..stop];
    if rest[stop..].starts_with(';') || between.contains(".entry") || between.contains(".func") {
        return Ok(None);
    }
    let open = at + stop;
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(&text[open + 1..open + i]));
                }
            }
            _ => {}
        }
    }
    Err(Unbalanced)
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

    /// nvcc puts performance directives between the parameters and the body; a string may hold
    /// what looks like a comment; a body that never closes ends the search (once, not per entry).
    #[test]
    fn directives_strings_and_unclosed_bodies() {
        let ptx = ".file 1 \"/src/a/*b.cu\"\n.visible .entry k(.param .u64 a)\n.maxntid 256, 1, 1\n.minnctapersm 2\n{\n ret;\n}\n.entry decl(.param .u64 a);\n.entry next(.param .u64 a)\n{ ret; }\n";
        let text = without_comments(ptx);
        assert!(text.contains("/src/a/*b.cu"), "{text}");
        let found = entries(&text);
        let names: Vec<&str> = found.iter().map(|e| e.name).collect();
        assert_eq!(names, ["k", "decl", "next"]);
        assert_eq!(found[0].body.map(str::trim), Some("ret;"));
        assert_eq!(found[1].body, None);
        assert_eq!(found[2].body.map(str::trim), Some("ret;"));
        let unclosed = ".entry k{".repeat(20_000);
        let found = entries(&unclosed);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].body, None);
    }
}
