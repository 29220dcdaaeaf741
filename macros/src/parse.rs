//! Parsing and checking the attribute's arguments and the function it is on.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, LitStr, ReturnType, Type};

/// The checked arguments of one `#[job(...)]`.
pub(crate) struct JobArgs {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) cron: Option<String>,
    pub(crate) rrule: Option<String>,
    pub(crate) tz: Option<String>,
}

pub(crate) fn args(attr: TokenStream, function: &ItemFn) -> syn::Result<JobArgs> {
    let mut name: Option<LitStr> = None;
    let mut description: Option<LitStr> = None;
    let mut cron: Option<LitStr> = None;
    let mut rrule: Option<LitStr> = None;
    let mut tz: Option<LitStr> = None;
    let parser = syn::meta::parser(|meta| {
        let slot = if meta.path.is_ident("name") {
            &mut name
        } else if meta.path.is_ident("description") {
            &mut description
        } else if meta.path.is_ident("cron") {
            &mut cron
        } else if meta.path.is_ident("rrule") {
            &mut rrule
        } else if meta.path.is_ident("tz") {
            &mut tz
        } else {
            return Err(
                meta.error("unknown #[job] argument: use name, description, cron, rrule or tz")
            );
        };
        if slot.is_some() {
            return Err(meta.error("this #[job] argument is given twice"));
        }
        *slot = Some(meta.value()?.parse()?);
        Ok(())
    });
    parser.parse2(attr)?;

    let name_value = name
        .as_ref()
        .map_or_else(|| function.sig.ident.to_string(), LitStr::value);
    let name_span = name
        .as_ref()
        .map_or(function.sig.ident.span(), LitStr::span);
    let valid = !name_value.is_empty()
        && name_value.len() <= 128
        && name_value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(syn::Error::new(
            name_span,
            "a job name is 1 to 128 letters, digits, '-', '_' or '.'",
        ));
    }
    if let (Some(_), Some(r)) = (&cron, &rrule) {
        return Err(syn::Error::new(
            r.span(),
            "give either cron or rrule, not both",
        ));
    }
    if let Some(c) = &cron {
        check_cron(&c.value())
            .map_err(|e| syn::Error::new(c.span(), format!("invalid cron expression: {e}")))?;
    }
    if let (Some(t), None, None) = (&tz, &cron, &rrule) {
        return Err(syn::Error::new(
            t.span(),
            "tz needs a schedule: add cron or rrule",
        ));
    }
    Ok(JobArgs {
        name: name_value,
        description: description.map(|d| d.value()).unwrap_or_default(),
        cron: cron.map(|c| c.value()),
        rrule: rrule.map(|r| r.value()),
        tz: tz.map(|t| t.value()),
    })
}

/// The same reading of cron the admin nodes apply (`carillon-cron`): 5 fields Unix, 6–7
/// fields Quartz.
fn check_cron(expression: &str) -> Result<(), String> {
    carillon_cron::CronExpr::parse(expression)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks the function is `async fn name(ctx: JobContext) -> Result<T, E>`.
pub(crate) fn function(function: &ItemFn) -> syn::Result<()> {
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "a #[job] handler must be an `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a #[job] handler cannot be generic",
        ));
    }
    let mut inputs = sig.inputs.iter();
    let ctx_ok = match (inputs.next(), inputs.next()) {
        (Some(FnArg::Typed(arg)), None) => matches!(
            &*arg.ty,
            Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "JobContext")
        ),
        _ => false,
    };
    if !ctx_ok {
        let span = if sig.inputs.is_empty() {
            sig.ident.span()
        } else {
            sig.inputs.span()
        };
        return Err(syn::Error::new(
            span,
            "a #[job] handler takes exactly one argument, `ctx: JobContext`",
        ));
    }
    match &sig.output {
        ReturnType::Type(_, ty) if is_result(ty) => Ok(()),
        other => Err(syn::Error::new(
            if matches!(other, ReturnType::Default) {
                Span::call_site()
            } else {
                other.span()
            },
            "a #[job] handler returns `Result<T, E>` (T: Serialize, E: Display)",
        )),
    }
}

fn is_result(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Result"))
}
