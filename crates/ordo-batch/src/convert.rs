//! OpenAI chat-completions bodies to Anthropic Messages parameters (for Message Batches), and
//! back for the answers: what converts exactly is converted, anything else is refused by field.

use serde_json::{json, Map, Value};

/// Anthropic's rule for a batch request's `custom_id`.
pub fn valid_anthropic_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Body fields that have an Anthropic equivalent or carry nothing the answer depends on.
const CONVERTED: [&str; 11] = [
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "metadata",
    "user",
    "stream",
    "n",
];

fn text_of_parts(field: &str, parts: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let f = format!("{field}[{j}]");
        match p["type"].as_str() {
            Some("text") => match p["text"].as_str() {
                Some(t) => out.push(json!({"type": "text", "text": t})),
                None => return Err(format!("field `{f}.text`: expected a string")),
            },
            Some("image_url") => {
                let url = p["image_url"]["url"].as_str().or_else(|| p["image_url"].as_str());
                let Some(url) = url else { return Err(format!("field `{f}.image_url.url`: missing")) };
                out.push(image(&f, url)?);
            }
            Some(other) => return Err(format!("field `{f}.type`: {other:?} parts have no Anthropic equivalent")),
            None => return Err(format!("field `{f}.type`: missing")),
        }
    }
    Ok(out)
}

fn image(field: &str, url: &str) -> Result<Value, String> {
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((mt, data)) = rest.split_once(";base64,") else {
            return Err(format!(
                "field `{field}.image_url.url`: a data URL must be base64 (data:image/png;base64,...)"
            ));
        };
        if !matches!(mt, "image/jpeg" | "image/png" | "image/gif" | "image/webp") {
            return Err(format!(
                "field `{field}.image_url.url`: media type {mt:?} (Anthropic takes image/jpeg, image/png, image/gif, image/webp)"
            ));
        }
        Ok(json!({"type": "image", "source": {"type": "base64", "media_type": mt, "data": data}}))
    } else if url.starts_with("https://") || url.starts_with("http://") {
        Ok(json!({"type": "image", "source": {"type": "url", "url": url}}))
    } else {
        Err(format!("field `{field}.image_url.url`: expected an http(s) or data: URL"))
    }
}

/// Convert the body of an OpenAI `/v1/chat/completions` request into the `params` of an
/// Anthropic Message Batches request. System and developer messages (which must come first)
/// become `system`; `max_completion_tokens` or `max_tokens` become `max_tokens` (required);
/// `stop` becomes `stop_sequences`; `user` becomes `metadata.user_id`; text and image parts
/// convert; `metadata` (OpenAI bookkeeping, also ordo's `client` and `deadline`) is dropped.
/// Anything else (tools, `n` > 1, `temperature` above 1, audio, names ...) is refused with the
/// field that cannot be converted.
pub fn chat_to_anthropic(body: &Value) -> Result<Value, String> {
    let Some(b) = body.as_object() else { return Err("field `body`: expected an object".into()) };
    for k in b.keys() {
        if !CONVERTED.contains(&k.as_str()) {
            return Err(format!(
                "field `body.{k}`: no Anthropic equivalent (remove it to send this request to Anthropic)"
            ));
        }
    }
    let mut p = Map::new();
    p.insert("model".into(), b.get("model").cloned().unwrap_or(Value::Null));
    let max = b
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| b.get("max_tokens").filter(|v| !v.is_null()));
    match max.and_then(Value::as_u64) {
        Some(m) if m >= 1 => {
            p.insert("max_tokens".into(), json!(m));
        }
        _ => return Err("field `body.max_tokens`: Anthropic requires max_tokens (a whole number >= 1)".into()),
    }
    if b.get("stream").is_some_and(|v| v != &Value::Bool(false) && !v.is_null()) {
        return Err("field `body.stream`: batches do not stream".into());
    }
    if b.get("n").is_some_and(|v| v.as_u64() != Some(1) && !v.is_null()) {
        return Err("field `body.n`: Anthropic gives one answer per request (n = 1)".into());
    }
    if let Some(t) = b.get("temperature").filter(|v| !v.is_null()) {
        match t.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => {
                p.insert("temperature".into(), t.clone());
            }
            _ => return Err(format!("field `body.temperature`: {t} is outside Anthropic's range 0 to 1")),
        }
    }
    if let Some(t) = b.get("top_p").filter(|v| !v.is_null()) {
        p.insert("top_p".into(), t.clone());
    }
    match b.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            p.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            p.insert("stop_sequences".into(), Value::Array(a.clone()));
        }
        Some(_) => return Err("field `body.stop`: expected a string or an array of strings".into()),
    }
    if let Some(u) = b.get("user").filter(|v| !v.is_null()) {
        match u.as_str() {
            Some(s) => {
                p.insert("metadata".into(), json!({"user_id": s}));
            }
            None => return Err("field `body.user`: expected a string".into()),
        }
    }
    let Some(msgs) = b.get("messages").and_then(Value::as_array) else {
        return Err("field `body.messages`: expected an array".into());
    };
    let mut system: Vec<Value> = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let f = format!("body.messages[{i}]");
        let Some(mo) = m.as_object() else { return Err(format!("field `{f}`: expected an object")) };
        for k in mo.keys() {
            if !matches!(k.as_str(), "role" | "content") {
                return Err(format!("field `{f}.{k}`: no Anthropic equivalent"));
            }
        }
        let role = mo.get("role").and_then(Value::as_str).unwrap_or("");
        let content = mo.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                if !out.is_empty() {
                    return Err(format!(
                        "field `{f}.role`: a {role} message after the conversation started (Anthropic has one system prompt, before the messages)"
                    ));
                }
                match content {
                    Value::String(s) => system.push(json!({"type": "text", "text": s})),
                    Value::Array(parts) => {
                        let blocks = text_of_parts(&format!("{f}.content"), parts)?;
                        if blocks.iter().any(|x| x["type"] != "text") {
                            return Err(format!("field `{f}.content`: a system prompt holds text only"));
                        }
                        system.extend(blocks);
                    }
                    _ => return Err(format!("field `{f}.content`: expected a string or text parts")),
                }
            }
            "user" | "assistant" => {
                let c = match content {
                    Value::String(s) => Value::String(s.clone()),
                    Value::Array(parts) => Value::Array(text_of_parts(&format!("{f}.content"), parts)?),
                    _ => return Err(format!("field `{f}.content`: expected a string or an array of parts")),
                };
                out.push(json!({"role": role, "content": c}));
            }
            other => return Err(format!("field `{f}.role`: {other:?} messages have no Anthropic equivalent")),
        }
    }
    if out.is_empty() {
        return Err("field `body.messages`: no user or assistant message".into());
    }
    if !system.is_empty() {
        // One system text is sent as a string (its common form); several as text blocks.
        let sys = if system.len() == 1 { system[0]["text"].clone() } else { Value::Array(system) };
        p.insert("system".into(), sys);
    }
    p.insert("messages".into(), Value::Array(out));
    Ok(Value::Object(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_prompt_max_tokens_and_stop_convert() {
        let body = json!({"model": "claude-haiku-4-5", "max_tokens": 300, "temperature": 0.2, "stop": "END",
            "metadata": {"client": "acme"}, "user": "u-17",
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": [{"type": "text", "text": "Hi"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]});
        let p = chat_to_anthropic(&body).expect("converts");
        assert_eq!(
            p,
            json!({"model": "claude-haiku-4-5", "max_tokens": 300, "temperature": 0.2, "stop_sequences": ["END"],
                "metadata": {"user_id": "u-17"}, "system": "Be brief.",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]})
        );
        // max_completion_tokens wins over max_tokens, as OpenAI reads them.
        let body = json!({"model": "m", "max_tokens": 5, "max_completion_tokens": 9, "messages": [{"role": "user", "content": "x"}]});
        assert_eq!(chat_to_anthropic(&body).expect("converts")["max_tokens"], 9);
    }

    #[test]
    fn what_cannot_convert_is_refused_by_field() {
        let refuse = |body: Value| chat_to_anthropic(&body).expect_err("refused");
        let m = json!([{"role": "user", "content": "x"}]);
        assert!(refuse(json!({"model": "m", "messages": m})).contains("`body.max_tokens`"));
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": m, "tools": []})).contains("`body.tools`"));
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": m, "temperature": 1.5})).contains("0 to 1"));
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": m, "n": 2})).contains("`body.n`"));
        let late_system = json!([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]);
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": late_system})).contains("messages[1].role"));
        let tool = json!([{"role": "tool", "content": "x", "tool_call_id": "t"}]);
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": tool})).contains("messages[0].tool_call_id"));
        let audio = json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]);
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": audio})).contains("\"input_audio\""));
        assert!(refuse(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "s"}]}))
            .contains("no user or assistant"));
    }

    #[test]
    fn anthropic_ids() {
        assert!(valid_anthropic_id("acme-1_x"));
        assert!(!valid_anthropic_id("acme:1"));
        assert!(!valid_anthropic_id(""));
        assert!(!valid_anthropic_id(&"a".repeat(65)));
    }
}
