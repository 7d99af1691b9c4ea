//! `#[derive(Module)]` for strata's nn modules (re-exported as `strata::nn::Module`).
//!
//! The struct needs named fields and one field of type `ModuleCore`. Every other field is
//! registered under its name the first time the module is used, through the `ModuleField`
//! trait: a module becomes a child, a `Vec` of modules children `name.0`, `name.1`, ..., an
//! `Option` of one a child when present, a `TensorSlot` a parameter. Field attributes:
//!
//! - `#[module(skip)]`: not registered (a size, a flag, a closure);
//! - `#[module(rename = "key")]`: registered as `key` (the state-dict key);
//! - `#[module(buffer)]`, `#[module(buffer, persistent = false)]`: a `TensorSlot` that is a
//!   buffer (saved in the state dict unless not persistent), not a parameter.
//!
//! On the struct, `#[module(crate = path)]` names the nn crate (default `::strata::nn`;
//! `strata_nn` for a program that depends on that crate directly). The derive implements
//! `Module`; the struct implements `Forward` (its computation).

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Error, Fields, LitStr, Path, Type};

/// Implements `Module` for a struct whose fields are its children, parameters and buffers.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// How one field is registered.
enum Role {
    Skip,
    Core,
    Field { key: String, buffer: Option<bool> },
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let krate = crate_path(input)?;
    let Data::Struct(data) = &input.data else {
        return Err(Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a struct with named fields (one of them a ModuleCore)",
        ));
    };
    let mut core = None;
    let mut keys: Vec<String> = Vec::new();
    let mut registrations = Vec::new();
    for field in &fields.named {
        let Some(ident) = &field.ident else { continue };
        match role(field)? {
            Role::Skip => {}
            Role::Core => {
                if core.is_some() {
                    return Err(Error::new_spanned(
                        field,
                        "#[derive(Module)]: a second ModuleCore field; a module has one",
                    ));
                }
                core = Some(ident.clone());
            }
            Role::Field { key, buffer } => {
                if key.is_empty() || key.contains('.') {
                    return Err(Error::new_spanned(
                        field,
                        format!("#[derive(Module)]: {key:?} cannot be a key: keys are non-empty and have no '.'"),
                    ));
                }
                if keys.contains(&key) {
                    return Err(Error::new_spanned(
                        field,
                        format!("#[derive(Module)]: two fields are registered as {key:?}"),
                    ));
                }
                registrations.push(match buffer {
                    None => quote! {
                        #krate::__derive::ModuleField::register_field(&self.#ident, core, #key)?;
                    },
                    Some(persistent) => quote! {
                        core.register_buffer_slot(#key, &self.#ident, #persistent)?;
                    },
                });
                keys.push(key);
            }
        }
    }
    let Some(core) = core else {
        return Err(Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a field of type ModuleCore (`core: ModuleCore::new(\"Name\")`)",
        ));
    };
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::__derive::Module for #name #ty_generics #where_clause {
            fn core(&self) -> &#krate::__derive::ModuleCore {
                self.#core.register_fields_once(|core| {
                    #(#registrations)*
                    ::core::result::Result::Ok(())
                });
                &self.#core
            }

            fn forward(
                &self,
                x: &#krate::__derive::Tensor,
            ) -> #krate::__derive::Result<#krate::__derive::Tensor> {
                <Self as #krate::__derive::Forward>::forward(self, x)
            }
        }
    })
}

/// The nn crate's path: `#[module(crate = path)]`, or `::strata::nn`.
fn crate_path(input: &DeriveInput) -> syn::Result<Path> {
    let mut path: Option<Path> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                path = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("#[derive(Module)]: on the struct, only `crate = path` is known"))
            }
        })?;
    }
    Ok(path.unwrap_or_else(|| syn::parse_quote!(::strata::nn)))
}

fn role(field: &syn::Field) -> syn::Result<Role> {
    let mut skip = false;
    let mut rename: Option<String> = None;
    let mut buffer = false;
    let mut persistent = true;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
            } else if meta.path.is_ident("rename") {
                rename = Some(meta.value()?.parse::<LitStr>()?.value());
            } else if meta.path.is_ident("buffer") {
                buffer = true;
            } else if meta.path.is_ident("persistent") {
                persistent = meta.value()?.parse::<syn::LitBool>()?.value;
            } else {
                return Err(meta.error(
                    "#[derive(Module)]: known field attributes are skip, rename = \"key\", \
                     buffer and persistent = false",
                ));
            }
            Ok(())
        })?;
    }
    if skip {
        return Ok(Role::Skip);
    }
    if is_core(&field.ty) {
        return Ok(Role::Core);
    }
    if !persistent && !buffer {
        return Err(Error::new(
            Span::call_site(),
            "#[derive(Module)]: `persistent = false` is for a buffer (`#[module(buffer, persistent = false)]`)",
        ));
    }
    let key = rename.unwrap_or_else(|| {
        field
            .ident
            .as_ref()
            .map(|i| i.to_string().trim_start_matches("r#").to_owned())
            .unwrap_or_default()
    });
    Ok(Role::Field {
        key,
        buffer: buffer.then_some(persistent),
    })
}

/// Whether a field's type is `ModuleCore` (by its last path segment).
fn is_core(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "ModuleCore"))
}
