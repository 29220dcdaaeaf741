//! Every setting a node takes, commented, with its default: `carillon config example` prints
//! it, and the Debian package installs it as `/etc/carillon/carillon.toml`. Its tests hold it
//! to the code: every key is one `Config` takes, every default is the code's, and every field
//! of `Config` is shown.

/// The text (`example.toml` beside this file).
pub const EXAMPLE: &str = include_str!("example.toml");

/// The text with the commented settings made live: the defaults (`# key = …`) always, the
/// examples (`# e.g. key = …`) and the optional sections (`# [auth.oidc]`) with `examples`.
/// Without `examples`, an optional section's lines are left out whole.
#[cfg(test)]
fn uncommented(examples: bool) -> String {
    let mut live = String::new();
    let mut in_optional = false;
    for line in EXAMPLE.lines() {
        if let Some(section) = line.strip_prefix("# [") {
            in_optional = !examples;
            if examples {
                live.push('[');
                live.push_str(section);
                live.push('\n');
            }
            continue;
        }
        if line.starts_with('[') {
            in_optional = false;
            live.push_str(line);
            live.push('\n');
            continue;
        }
        if in_optional {
            continue;
        }
        let setting = match line.strip_prefix("# e.g. ") {
            Some(example) if examples => Some(example),
            Some(_) => None,
            None => line.strip_prefix("# ").filter(|rest| is_setting(rest)),
        };
        if let Some(setting) = setting {
            live.push_str(setting);
            live.push('\n');
        }
    }
    live
}

/// `key = value`, as opposed to prose.
#[cfg(test)]
fn is_setting(line: &str) -> bool {
    line.split_once(" = ").is_some_and(|(key, _)| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::oidc::OidcConfig;
    use crate::config::Config;

    fn parse(text: &str) -> Config {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn every_key_shown_is_a_setting() {
        let config = parse(&uncommented(true));
        assert!(config.auth.oidc.is_some());
        assert!(config.database.url.is_some());
    }

    #[test]
    fn every_default_shown_is_the_code_default() {
        let shown = parse(&uncommented(false));
        assert_eq!(format!("{shown:#?}"), format!("{:#?}", Config::default()));
        // The optional section's defaults, read on their own.
        let section = EXAMPLE
            .split("# [auth.oidc]\n")
            .nth(1)
            .and_then(|rest| rest.split("\n[").next())
            .unwrap_or_default();
        let defaults: String = section
            .lines()
            .filter_map(|l| l.strip_prefix("# ").filter(|rest| is_setting(rest)))
            .map(|l| format!("{l}\n"))
            .collect();
        let oidc: OidcConfig = toml::from_str(&defaults).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            format!("{oidc:#?}"),
            format!("{:#?}", OidcConfig::default())
        );
    }

    #[test]
    fn every_setting_is_shown() {
        let mut missing = Vec::new();
        let mut fields = Vec::new();
        settings_of(&format!("{:#?}", Config::default()), "", &mut fields);
        settings_of(
            &format!("{:#?}", OidcConfig::default()),
            "auth.oidc.",
            &mut fields,
        );
        // A section of its own, whose fields are the ones above.
        fields.retain(|field| field != "auth.oidc");
        let live = uncommented(true);
        for field in fields {
            let (section, key) = field.rsplit_once('.').unwrap_or(("", &field));
            let shown = live
                .split("\n[")
                .map(|part| part.split_once("]\n").unwrap_or(("", part)))
                .filter(|(name, _)| *name == section)
                .any(|(_, body)| body.lines().any(|l| l.starts_with(&format!("{key} = "))));
            if !shown {
                missing.push(field);
            }
        }
        assert!(missing.is_empty(), "not in example.toml: {missing:?}");
    }

    /// The dotted paths of the settings in a `{:#?}` of a config: fields, descending into the
    /// `…Config` structs only.
    fn settings_of(debug: &str, prefix: &str, into: &mut Vec<String>) {
        let mut path: Vec<(usize, String)> = Vec::new();
        let mut skip_below: Option<usize> = None;
        for line in debug.lines().skip(1) {
            let indent = line.len() - line.trim_start().len();
            if skip_below.is_some_and(|depth| indent > depth) {
                continue;
            }
            skip_below = None;
            let Some((name, value)) = line.trim_start().split_once(": ") else {
                continue;
            };
            path.retain(|(depth, _)| *depth < indent);
            let dotted: String = path
                .iter()
                .map(|(_, p)| format!("{p}."))
                .chain([name.to_owned()])
                .collect();
            if value.ends_with("Config {") {
                path.push((indent, name.to_owned()));
            } else {
                into.push(format!("{prefix}{dotted}"));
                if value.ends_with('{') || value.ends_with('[') || value.ends_with('(') {
                    skip_below = Some(indent);
                }
            }
        }
    }
}
