//! What `#[job]` expands to: the function as written, and a `JobDescriptor` in the SDK's
//! link-time slice of handlers.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ItemFn;

use crate::parse;

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let function: ItemFn = syn::parse2(item)?;
    parse::function(&function)?;
    let args = parse::args(attr, &function)?;
    let ident = &function.sig.ident;
    let name = &args.name;
    let description = &args.description;
    let option = |v: &Option<String>| match v {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    };
    let (cron, rrule, tz) = (option(&args.cron), option(&args.rrule), option(&args.tz));
    // Two handlers with one name in one module collide on this item at compile time (the SDK
    // also refuses duplicates across modules when it starts).
    let sanitized: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let marker = format_ident!("__CARILLON_DUPLICATE_JOB_NAME_{}", sanitized);
    Ok(quote! {
        #function

        #[doc(hidden)]
        #[allow(non_upper_case_globals, dead_code)]
        const #marker: () = ();

        const _: () = {
            #[::carillon_executor::__private::linkme::distributed_slice(::carillon_executor::__private::JOBS)]
            #[linkme(crate = ::carillon_executor::__private::linkme)]
            static DESCRIPTOR: ::carillon_executor::__private::JobDescriptor =
                ::carillon_executor::__private::JobDescriptor {
                    name: #name,
                    description: #description,
                    cron: #cron,
                    rrule: #rrule,
                    timezone: #tz,
                    run: |ctx| ::std::boxed::Box::pin(async move {
                        ::carillon_executor::__private::into_result(#ident(ctx).await)
                    }),
                };
        };
    })
}
