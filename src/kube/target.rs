//! Which objects a command acts on: `NAME` or `NAMESPACE/NAME` arguments, `-n`, `-A` and `-l`, with the
//! contradictory combinations refused in one sentence before anything touches the cluster.

/// A usage error: the command line asks for something contradictory or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The raw target arguments of a command.
#[derive(Debug, Clone, Default)]
pub struct TargetArgs {
    /// Positional `NAME` / `NAMESPACE/NAME`.
    pub names: Vec<String>,
    /// `-n`, when given explicitly.
    pub namespace: Option<String>,
    /// `-A`.
    pub all_namespaces: bool,
    /// `-l`.
    pub selector: Option<String>,
}

/// One named object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a command acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// These objects.
    Named(Vec<ObjectKey>),
    /// Every object in one namespace, optionally filtered by a label selector.
    Namespace {
        /// Namespace.
        namespace: String,
        /// Label selector.
        selector: Option<String>,
    },
    /// Every object in every namespace, optionally filtered by a label selector.
    AllNamespaces {
        /// Label selector.
        selector: Option<String>,
    },
}

impl Targets {
    /// Where these targets were looked for, to finish "No Etcds found …": `in namespace shoot--a`, `in any
    /// namespace`, with ` with labels matching SELECTOR` when a selector narrowed it.
    pub fn searched(&self) -> String {
        let (scope, selector) = match self {
            Targets::Named(keys) => {
                let mut namespaces: Vec<&str> = keys.iter().map(|k| k.namespace.as_str()).collect();
                namespaces.dedup();
                let scope = match namespaces.as_slice() {
                    [one] => format!("named {} in namespace {one}", join_names(keys)),
                    _ => format!("named {}", keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
                };
                (scope, None)
            }
            Targets::Namespace { namespace, selector } => (format!("in namespace {namespace}"), selector.as_deref()),
            Targets::AllNamespaces { selector } => ("in any namespace".to_string(), selector.as_deref()),
        };
        match selector {
            Some(sel) => format!("{scope} with labels matching {sel}"),
            None => scope,
        }
    }
}

fn join_names(keys: &[ObjectKey]) -> String {
    keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Whether a command may act on "everything" when no name is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnnamed {
    /// Reads (`status`): no names means every object in scope.
    ListAll,
    /// Writes: a name or a selector is required.
    RequireNameOrSelector,
    /// Exactly one name (e.g. `list-resources`).
    RequireOneName,
}

/// Resolves target arguments against the default namespace (from the context).
pub fn resolve(
    args: &TargetArgs,
    default_namespace: &str,
    when_unnamed: WhenUnnamed,
    kind: &str,
) -> Result<Targets, UsageError> {
    let err = |s: String| Err(UsageError(s));
    if let Some(ns) = &args.namespace {
        validate_dns_label(ns).map_err(|e| UsageError(format!("invalid namespace {ns:?}: {e}")))?;
    }
    if let Some(sel) = &args.selector {
        validate_selector(sel)?;
    }
    if args.all_namespaces && args.namespace.is_some() {
        return err("--all-namespaces and --namespace contradict each other; use one of them".into());
    }
    if !args.names.is_empty() {
        // `-A NAMESPACE/NAME` is what completion offers with -A: the name says its namespace, so -A adds nothing.
        if args.all_namespaces && args.names.iter().any(|n| !n.contains('/')) {
            return err(format!("--all-namespaces cannot be combined with {kind} names; write NAMESPACE/NAME instead"));
        }
        if args.selector.is_some() {
            return err(format!("--selector cannot be combined with {kind} names; use one of them"));
        }
        if when_unnamed == WhenUnnamed::RequireOneName && args.names.len() > 1 {
            return err(format!("expected exactly one {kind} name, got {}", args.names.len()));
        }
        let mut keys = Vec::new();
        for raw in &args.names {
            let key = parse_name(raw, args.namespace.as_deref(), default_namespace, kind)?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        return Ok(Targets::Named(keys));
    }
    match when_unnamed {
        WhenUnnamed::RequireOneName => err(format!("expected an {kind} name (NAME or NAMESPACE/NAME)")),
        WhenUnnamed::RequireNameOrSelector if args.selector.is_none() => {
            err(format!("name the {kind} (NAME or NAMESPACE/NAME) or select with -l"))
        }
        _ if args.all_namespaces => Ok(Targets::AllNamespaces { selector: args.selector.clone() }),
        _ => Ok(Targets::Namespace {
            namespace: args.namespace.clone().unwrap_or_else(|| default_namespace.to_string()),
            selector: args.selector.clone(),
        }),
    }
}

fn parse_name(raw: &str, flag_ns: Option<&str>, default_ns: &str, kind: &str) -> Result<ObjectKey, UsageError> {
    let (ns, name) = match raw.split_once('/') {
        Some((ns, name)) => {
            if let Some(flag) = flag_ns
                && flag != ns
            {
                return Err(UsageError(format!(
                    "{raw:?} names namespace {ns:?} but --namespace is {flag:?}; drop one of them"
                )));
            }
            validate_dns_label(ns).map_err(|e| UsageError(format!("invalid namespace in {raw:?}: {e}")))?;
            (ns.to_string(), name)
        }
        None => (flag_ns.unwrap_or(default_ns).to_string(), raw),
    };
    validate_dns_subdomain(name).map_err(|e| UsageError(format!("invalid {kind} name {raw:?}: {e}")))?;
    Ok(ObjectKey { namespace: ns, name: name.to_string() })
}

/// Checks a DNS-1123 label (namespaces).
pub fn validate_dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    let ok = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("must consist of lower case letters, digits and '-', starting and ending with a letter or digit".into())
    }
}

/// Checks a DNS-1123 subdomain (object names).
pub fn validate_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 253 {
        return Err("must be at most 253 characters".into());
    }
    let ok = s.split('.').all(|part| {
        !part.is_empty()
            && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    });
    if ok {
        Ok(())
    } else {
        Err("must consist of lower case letters, digits, '-' and '.', starting and ending with a letter or digit"
            .into())
    }
}

/// Checks a label selector as the API server parses it (the `label-selector` crate), so that one it would refuse is
/// refused before anything is sent. An empty `-l` is refused too, though the server reads it as "everything":
/// given on purpose it says nothing, and from a script it is usually a variable that was not set.
pub fn validate_selector(sel: &str) -> Result<(), UsageError> {
    if sel.trim().is_empty() {
        return Err(UsageError(format!("invalid label selector {sel:?}: empty (leave out -l to select every Etcd)")));
    }
    label_selector::parse(sel).map(drop).map_err(|e| UsageError(format!("invalid label selector {sel:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(names: &[&str], ns: Option<&str>, all: bool, sel: Option<&str>) -> TargetArgs {
        TargetArgs {
            names: names.iter().map(|s| s.to_string()).collect(),
            namespace: ns.map(Into::into),
            all_namespaces: all,
            selector: sel.map(Into::into),
        }
    }

    #[test]
    fn names_take_the_context_namespace_unless_qualified() {
        let t = resolve(&args(&["a", "other/b"], None, false, None), "ctx", WhenUnnamed::ListAll, "etcd").unwrap();
        assert_eq!(
            t,
            Targets::Named(vec![
                ObjectKey { namespace: "ctx".into(), name: "a".into() },
                ObjectKey { namespace: "other".into(), name: "b".into() }
            ])
        );
    }

    #[test]
    fn searched_says_where_and_with_which_selector() {
        let searched = |a: TargetArgs| resolve(&a, "ctx", WhenUnnamed::ListAll, "etcd").unwrap().searched();
        assert_eq!(searched(args(&[], Some("foo"), false, None)), "in namespace foo");
        assert_eq!(searched(args(&[], None, false, None)), "in namespace ctx");
        assert_eq!(searched(args(&[], None, true, None)), "in any namespace");
        assert_eq!(
            searched(args(&[], None, true, Some("role=main"))),
            "in any namespace with labels matching role=main"
        );
        assert_eq!(
            searched(args(&[], Some("foo"), false, Some("a in (b)"))),
            "in namespace foo with labels matching a in (b)"
        );
        assert_eq!(searched(args(&["a", "b"], None, false, None)), "named a, b in namespace ctx");
        assert_eq!(searched(args(&["a", "other/b"], None, false, None)), "named ctx/a, other/b");
    }

    #[test]
    fn contradictions_are_refused() {
        let cases = [
            args(&["a"], None, true, None),
            args(&["a"], None, false, Some("x=y")),
            args(&["ns1/a"], Some("ns2"), false, None),
            args(&[], Some("ns"), true, None),
            args(&["Bad_Name"], None, false, None),
            args(&[], None, false, Some("a in b")),
        ];
        for a in cases {
            assert!(resolve(&a, "ctx", WhenUnnamed::ListAll, "etcd").is_err(), "{a:?}");
        }
        assert!(resolve(&args(&["ns1/a"], Some("ns1"), false, None), "ctx", WhenUnnamed::ListAll, "etcd").is_ok());
        // -A with a bare name among qualified ones is still refused.
        assert!(resolve(&args(&["ns1/a", "b"], None, true, None), "ctx", WhenUnnamed::ListAll, "etcd").is_err());
    }

    #[test]
    fn all_namespaces_accepts_qualified_names() {
        let t = resolve(&args(&["ns1/a", "ns2/b"], None, true, None), "ctx", WhenUnnamed::ListAll, "etcd").unwrap();
        assert_eq!(
            t,
            Targets::Named(vec![
                ObjectKey { namespace: "ns1".into(), name: "a".into() },
                ObjectKey { namespace: "ns2".into(), name: "b".into() }
            ])
        );
    }

    #[test]
    fn writes_need_a_name_or_selector() {
        assert!(resolve(&args(&[], None, false, None), "ctx", WhenUnnamed::RequireNameOrSelector, "etcd").is_err());
        assert!(
            resolve(&args(&[], None, false, Some("a=b")), "ctx", WhenUnnamed::RequireNameOrSelector, "etcd").is_ok()
        );
        assert!(resolve(&args(&["a", "b"], None, false, None), "ctx", WhenUnnamed::RequireOneName, "etcd").is_err());
    }

    #[test]
    fn selectors_are_checked() {
        for ok in [
            "a=b",
            "a==b,c!=d",
            "a",
            "!a",
            "env in (prod, dev)",
            "x notin (a)",
            "app.kubernetes.io/part-of=etcd-main",
            "app in ()",
            "a>1",
        ] {
            assert!(validate_selector(ok).is_ok(), "{ok}");
        }
        for bad in ["", " ", "a=b=c", "=b", "a in b", ",", "a b", "a=-b", "x/y/z=a", "a>x"] {
            assert!(validate_selector(bad).is_err(), "{bad}");
        }
    }
}
