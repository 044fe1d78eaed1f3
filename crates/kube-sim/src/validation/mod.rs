//! Validation of custom resources like kube-apiserver: structural OpenAPI schema
//! (types, required, enum, pattern, format, bounds, nullable, preserve-unknown-fields,
//! int-or-string), defaulting, pruning, and `x-kubernetes-validations` CEL rules.
//!
//! Contract used by the API server (do not change the signatures without updating callers):
//!
//! ```ignore
//! let v = CrdValidator::new(&openapi_v3_schema_json)?;   // Err lists CEL rules that do not compile
//! v.default_and_prune(&mut obj);                           // on create/update, before validation
//! let errs: Vec<FieldError> = v.validate(&obj, old.as_ref(), Scope::Main);
//! ```
//!
//! Files: `schema` parses the structural schema, `defaulting` prunes and defaults,
//! `structural` and `formats` validate values like kube-openapi, `cel_rules` compiles and
//! evaluates `x-kubernetes-validations` with `cel_library` (the Kubernetes CEL functions), and
//! `errors` prints field errors exactly like `k8s.io/apimachinery`.
//!
//! Messages follow kube-apiserver 1.35+ (kubernetes/kubernetes#132798, #133832): a failed CEL
//! rule prints the value of a scalar (`spec.replicas: Invalid value: 1: ...`) and no value for
//! objects and arrays (`spec: Invalid value: <message>`); before 1.35 it printed the type
//! (`Invalid value: "object"`). Schema errors that make rules meaningless (type, required, enum,
//! too long, too many) skip the rules and add kube's `<nil>: ... some validation rules were not
//! checked` cause. Unchanged values are ratcheted on update (`CRDValidationRatcheting`).
//!
//! Approximated: rules are checked at compile time for syntax, variables, functions, field
//! names against the schema and an evident non-bool result, but argument types are not
//! type-checked (a mismatch surfaces at evaluation, as `no such overload`); there is no CEL cost
//! budget; list-type set/map values compare in order in `==`; quantities compute in `f64`; the
//! `format`, `semver` and authz CEL libraries are not provided (a rule using them fails to
//! compile, it is never skipped).

use std::sync::Arc;

use serde_json::Value;

pub mod builtin;
mod cel_library;
mod cel_rules;
mod defaulting;
mod errors;
mod formats;
mod schema;
mod structural;

#[cfg(test)]
mod tests;

use errors::Seg;
use schema::Schema;

/// Which part of the object a write touches: the main resource validates everything except
/// `status`; the status subresource validates only `status` (like kube-apiserver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// create / update / patch of the resource itself
    Main,
    /// update / patch of the `status` subresource
    Status,
}

/// One validation failure in kube-apiserver's shape (`metav1.StatusCause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, `FieldValueTooLong`, ...
    pub reason: String,
    /// dotted path as kube-apiserver prints it, e.g. `spec.replicas`
    pub field: String,
    /// full message, e.g. `spec.replicas: Invalid value: 1: Replicas can either be increased or be downscaled to 0.`
    pub message: String,
}

/// A rule or schema the validator cannot evaluate; reported at CRD registration.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SchemaError {
    /// where in the schema
    pub path: String,
    /// what is wrong
    pub message: String,
}

/// Compiled validator for one version of one CRD.
#[derive(Debug, Clone)]
pub struct CrdValidator {
    root: Arc<Schema>,
    rule_count: usize,
}

impl CrdValidator {
    /// Compiles `openAPIV3Schema` of one CRD version (including all CEL rules).
    pub fn new(schema: &Value) -> Result<Self, Vec<SchemaError>> {
        let mut errors = Vec::new();
        let mut root = Schema::parse(schema, "openAPIV3Schema", &mut errors);
        cel_rules::compile_tree(&mut root, "openAPIV3Schema", true, true, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        let rule_count = root.count_rules();
        Ok(Self { root: Arc::new(root), rule_count })
    }

    /// Number of `x-kubernetes-validations` rules compiled (all of them are evaluated).
    pub fn rule_count(&self) -> usize {
        self.rule_count
    }

    /// Applies schema defaults and prunes unknown fields, in place.
    pub fn default_and_prune(&self, obj: &mut Value) {
        defaulting::default_and_prune(obj, &self.root);
    }

    /// Validates `obj` (with `old` for transition rules on update).
    pub fn validate(&self, obj: &Value, old: Option<&Value>, scope: Scope) -> Vec<FieldError> {
        let Some(map) = obj.as_object() else {
            return vec![errors::type_invalid(
                String::new(),
                errors::Bad::Str("object".into()),
                "must be of type object",
            )];
        };
        let in_scope = |k: &str| match scope {
            Scope::Main => k != "status",
            Scope::Status => k == "status",
        };
        let old_map = old.and_then(Value::as_object);
        let root = &self.root;

        let mut findings = structural::Findings::default();
        let mut path: Vec<Seg> = Vec::new();
        for (k, ps) in &root.properties {
            if !in_scope(k) {
                continue;
            }
            if let Some(child) = map.get(k) {
                path.push(Seg::Field(k.clone()));
                structural::validate(ps, child, old_map.and_then(|m| m.get(k)), &mut path, &mut findings);
                path.pop();
            }
        }
        for k in &root.required {
            if in_scope(k) && !map.contains_key(k) {
                findings.schema.push(errors::required(k.clone(), ""));
            }
        }

        let mut out = findings.schema;
        out.extend(findings.embedded);
        out.extend(findings.lists);
        // strategy.go `hasBlockingErr`: rules are not evaluated on an object of the wrong shape
        // (only CRDs with rules have a CEL validator to skip)
        let blocking = [
            "FieldValueNotSupported",
            "FieldValueRequired",
            "FieldValueTooLong",
            "FieldValueTooMany",
            "FieldValueTypeInvalid",
        ];
        if self.rule_count > 0 && out.iter().any(|e| blocking.contains(&e.reason.as_str())) {
            out.push(errors::invalid(
                String::new(),
                errors::Bad::Null,
                "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            ));
            return out;
        }

        let mut cel_errors = Vec::new();
        let unchanged = old == Some(obj);
        cel_rules::eval_node(root, obj, old, unchanged, true, &mut path, &mut cel_errors);
        for (k, child) in map {
            if !in_scope(k) {
                continue;
            }
            let Some(ps) = root.properties.get(k) else {
                continue;
            };
            path.push(Seg::Field(k.clone()));
            let corr = cel_rules::Correlation { correlatable: true, parent_unchanged: unchanged };
            cel_rules::eval_tree(ps, child, old_map.and_then(|m| m.get(k)), corr, &mut path, &mut cel_errors);
            path.pop();
        }

        out.extend(cel_errors);
        out
    }
}
