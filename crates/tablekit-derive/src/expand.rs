//! The code `#[derive(TableEntity)]` generates.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Attribute, Data, DeriveInput, Error, Fields, GenericParam, Ident, LitStr, Path, Result, Type,
};

use crate::attrs;
use crate::naming::{constant_name, property_name_problem};
use crate::template::{self, Format, Segment};

/// One named field and what the derive decided about it.
struct FieldInfo<'a> {
    ident: &'a Ident,
    /// The field name without `r#`, as templates name it.
    name: String,
    ty: &'a Type,
    attrs: &'a [Attribute],
    settings: attrs::Field,
    /// The name the property is written under.
    ser_name: String,
    /// The name the property is read from.
    de_name: String,
}

pub(crate) fn derive(input: &DeriveInput) -> Result<TokenStream> {
    refuse_serde_derives(&input.attrs)?;
    let named = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => &named.named,
            Fields::Unnamed(_) | Fields::Unit => {
                return Err(Error::new(
                    input.ident.span(),
                    "#[derive(TableEntity)] needs a struct with named fields: each field is a \
                     property, stored under its name",
                ));
            }
        },
        Data::Enum(data) => {
            return Err(Error::new(
                data.enum_token.span,
                "#[derive(TableEntity)] supports structs with named fields only; for several \
                 entity types in one table, derive it on each struct and read them through an \
                 enum tagged with `EntityType`",
            ));
        }
        Data::Union(data) => {
            return Err(Error::new(
                data.union_token.span,
                "#[derive(TableEntity)] supports structs with named fields only",
            ));
        }
    };
    if let Some(lifetime) = input.generics.lifetimes().next() {
        return Err(Error::new(
            lifetime.span(),
            "a TableEntity is read back as an owned value (DeserializeOwned), so it cannot have \
             lifetime parameters; use owned field types (String, Vec<u8>)",
        ));
    }

    let container = attrs::container(&input.attrs)?;
    let mut errors: Option<Error> = None;
    let mut push_error = |e: Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let mut fields = Vec::with_capacity(named.len());
    for field in named {
        let Some(ident) = &field.ident else { continue };
        let settings = match attrs::field(&field.attrs) {
            Ok(settings) => settings,
            Err(e) => {
                push_error(e);
                continue;
            }
        };
        let name = ident.unraw().to_string();
        let cased = container.casing.apply(&name);
        let ser_name = settings
            .ser_rename
            .as_ref()
            .map_or_else(|| cased.clone(), LitStr::value);
        let de_name = settings
            .de_rename
            .as_ref()
            .map_or_else(|| cased.clone(), LitStr::value);
        if !settings.flatten {
            let checks = [
                (
                    settings.not_written.is_none(),
                    &ser_name,
                    &settings.ser_rename,
                ),
                (settings.not_read.is_none(), &de_name, &settings.de_rename),
            ];
            for (applies, property, rename) in checks {
                if let Some(problem) = applies.then(|| property_name_problem(property)).flatten() {
                    let span = rename.as_ref().map_or_else(|| ident.span(), LitStr::span);
                    push_error(Error::new(span, problem));
                    break;
                }
            }
        }
        fields.push(FieldInfo {
            ident,
            name,
            ty: &field.ty,
            attrs: &field.attrs,
            settings,
            ser_name,
            de_name,
        });
    }

    let ident = &input.ident;
    let mut templates = Vec::with_capacity(2);
    for (template, attribute) in [
        (&container.partition_key, "partition_key"),
        (&container.row_key, "row_key"),
    ] {
        match template {
            Some(lit) => match key_builder(lit, &fields, &container.krate) {
                Ok(code) => templates.push(code),
                Err(e) => push_error(e),
            },
            None => push_error(Error::new(
                ident.span(),
                format!(
                    "missing #[table({attribute} = \"...\")]: a TableEntity computes both keys \
                     from its fields, e.g. #[table(partition_key = \"{{department}}\", \
                     row_key = \"{{id:06}}\")]"
                ),
            )),
        }
    }
    for field in &fields {
        if let Err(e) = check_encrypt(field, &container) {
            push_error(e);
        }
    }
    if let Some(errors) = errors {
        return Err(errors);
    }
    let [partition_key, row_key] = [&templates[0], &templates[1]];
    let encrypted = encrypted_properties(&fields, &container.krate);

    let krate = &container.krate;
    let private = quote!(#krate::__private);
    let serde = quote!(#private::serde);
    let serde_path = LitStr::new(&serde.to_string(), Span::call_site());
    let remote = LitStr::new(&ident.to_string(), ident.span());
    let struct_rename = (!container.serde_renamed).then(|| quote!(#[serde(rename = #remote)]));
    let container_serde = input.attrs.iter().filter(|a| a.path().is_ident("serde"));
    let shadow_fields = fields.iter().map(shadow_field);

    let generics = &input.generics;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let turbofish = ty_generics.as_turbofish();
    let existing = where_clause.map(|w| &w.predicates);
    let existing = existing.iter().flat_map(|p| p.iter());
    let type_params: Vec<&Ident> = generics.type_params().map(|p| &p.ident).collect();
    let params = generics.params.iter().map(param_without_default);

    // serde infers these bounds too, unless the struct gives its own with `bound`; the
    // forwarding impls must ask for the same, or serde's inherent functions are not callable.
    let ser_preds = match &container.ser_bound {
        Some(bound) => bound.clone(),
        None => quote!(#(#type_params: #serde::Serialize,)*),
    };
    let de_preds = match &container.de_bound {
        Some(bound) => bound.clone(),
        None => quote!(#(#type_params: #serde::Deserialize<'de>,)*),
    };
    let entity_preds = entity_predicates(&type_params, &fields, &container, &private);
    let existing_ser = existing.clone();
    let existing_de = existing.clone();
    let existing_entity = existing;

    let constants = fields
        .iter()
        .filter_map(|f| constant(f, ident, &input.vis, &private));
    let action_lists = action_lists(&fields, ident, &input.vis);

    Ok(quote! {
        const _: () = {
            #[derive(#serde::Serialize, #serde::Deserialize)]
            #[serde(crate = #serde_path, remote = #remote)]
            #struct_rename
            #(#container_serde)*
            #[allow(dead_code)]
            struct __TableEntityShadow #generics #where_clause {
                #(#shadow_fields,)*
            }

            #[automatically_derived]
            impl #impl_generics #serde::Serialize for #ident #ty_generics
            where
                #(#existing_ser,)*
                #ser_preds
            {
                fn serialize<__S>(
                    &self,
                    __serializer: __S,
                ) -> ::core::result::Result<__S::Ok, __S::Error>
                where
                    __S: #serde::Serializer,
                {
                    __TableEntityShadow #turbofish ::serialize(self, __serializer)
                }
            }

            #[automatically_derived]
            impl<'de, #(#params),*> #serde::Deserialize<'de> for #ident #ty_generics
            where
                #(#existing_de,)*
                #de_preds
            {
                fn deserialize<__D>(__deserializer: __D) -> ::core::result::Result<Self, __D::Error>
                where
                    __D: #serde::Deserializer<'de>,
                {
                    __TableEntityShadow #turbofish ::deserialize(__deserializer)
                }
            }

            #[automatically_derived]
            impl #impl_generics #private::TableEntity for #ident #ty_generics
            where
                #(#existing_entity,)*
                #(#entity_preds,)*
            {
                fn keys(&self) -> #private::Result<#private::Keys> {
                    #private::Keys::new(#partition_key, #row_key)
                }

                #encrypted
            }
        };

        #[automatically_derived]
        impl #impl_generics #ident #ty_generics #where_clause {
            #(#constants)*

            #action_lists
        }
    })
}

/// Refuses `#[table(encrypt)]`, `#[table(sign)]` and `#[table(plain)]` where they cannot
/// hold: two on one field; encrypt or sign on a field serde does not write, on a flattened
/// field (its properties are another type's), and on a field read from a property other than
/// the one it is written to (a serde `alias`, or a rename for deserializing only) — the policy
/// decrypts or verifies the property it wrote, and a plain property stored under the other
/// name would fill the field unchecked; and encrypt on a key field (keys are never
/// encrypted, so the value would be stored in the clear in the key).
fn check_encrypt(field: &FieldInfo<'_>, container: &attrs::Container) -> Result<()> {
    let settings = &field.settings;
    let marks = [
        ("encrypt", settings.encrypt),
        ("sign", settings.sign),
        ("plain", settings.plain),
    ];
    let mut marked = marks
        .iter()
        .filter_map(|(name, span)| span.map(|s| (*name, s)));
    let Some((action, span)) = marked.next() else {
        return Ok(());
    };
    if let Some((other, second)) = marked.next() {
        return Err(Error::new(
            second,
            format!(
                "`{}` is marked both #[table({action})] and #[table({other})]: a property has \
                 one action",
                field.name
            ),
        ));
    }
    if action == "plain" {
        return Ok(());
    }
    let (verb, article) = if action == "encrypt" {
        ("encrypted", "an")
    } else {
        ("signed", "a")
    };
    if settings.flatten {
        return Err(Error::new(
            span,
            format!(
                "#[table({action})] cannot apply to a flattened field: mark the inner type's \
                 fields"
            ),
        ));
    }
    if settings.not_written.is_some() {
        return Err(Error::new(
            span,
            format!(
                "#[table({action})] on a field serde skips: it is not stored, so there is \
                 nothing to {action}"
            ),
        ));
    }
    if let Some(alias) = settings.alias {
        return Err(Error::new(
            alias,
            format!(
                "`{}` is {verb}: it cannot also be read from an alias, which would fill it \
                 from a property stored in the clear, unchecked; read old names in a \
                 migration instead",
                field.name
            ),
        ));
    }
    if field.ser_name != field.de_name {
        return Err(Error::new(
            span,
            format!(
                "`{}` is {verb} as `{}` but would be read from `{}`: {article} {verb} field is \
                 written and read under one name (use `#[serde(rename = \"...\")]`, not a \
                 rename for one direction)",
                field.name, field.ser_name, field.de_name
            ),
        ));
    }
    if action != "encrypt" {
        return Ok(());
    }
    let in_key = [&container.partition_key, &container.row_key]
        .into_iter()
        .flatten()
        .flat_map(|lit| template::parse(&lit.value()).unwrap_or_default())
        .any(|segment| matches!(segment, Segment::Field { name, .. } if name == field.name));
    if in_key {
        return Err(Error::new(
            span,
            format!(
                "`{}` is a key field: PartitionKey and RowKey are never encrypted, so its value \
                 would be stored in the clear in the key; keep sensitive values out of key \
                 templates",
                field.name
            ),
        ));
    }
    Ok(())
}

/// Inherent functions listing the fields marked `#[table(sign)]` and `#[table(plain)]` under
/// their stored names, for the encryption policy's `sign_only` and `plain`; nothing when no
/// field is marked either way, so that a type without them gains no inherent item.
fn action_lists(fields: &[FieldInfo<'_>], owner: &Ident, vis: &syn::Visibility) -> TokenStream {
    let names = |marked: fn(&attrs::Field) -> bool| {
        fields
            .iter()
            .filter(|f| marked(&f.settings))
            .map(|f| {
                let name = &f.ser_name;
                let cfgs = f.attrs.iter().filter(|a| a.path().is_ident("cfg"));
                quote!(#(#cfgs)* #name)
            })
            .collect::<Vec<_>>()
    };
    let signed = names(|s| s.sign.is_some());
    let plain = names(|s| s.plain.is_some());
    if signed.is_empty() && plain.is_empty() {
        return TokenStream::new();
    }
    let signed_doc = format!(
        "The properties of [`{owner}`] marked `#[table(sign)]`, under their stored names: \
         stored as written and covered by client-side encryption's item signature. Give them \
         to `EncryptionPolicyBuilder::sign_only`."
    );
    let plain_doc = format!(
        "The properties of [`{owner}`] marked `#[table(plain)]`, under their stored names: \
         stored as written and unsigned. Give them to `EncryptionPolicyBuilder::plain`."
    );
    quote! {
        #[doc = #signed_doc]
        #vis fn signed_properties() -> &'static [&'static str] {
            &[#(#signed),*]
        }

        #[doc = #plain_doc]
        #vis fn plain_properties() -> &'static [&'static str] {
            &[#(#plain),*]
        }
    }
}

/// `TableEntity::encrypted_properties`, listing the fields marked `#[table(encrypt)]` under
/// their stored names, with a check that each is a string type; nothing when none is marked
/// (the trait's default, an empty list, applies).
fn encrypted_properties(fields: &[FieldInfo<'_>], krate: &Path) -> TokenStream {
    let private = quote!(#krate::__private);
    let marked: Vec<&FieldInfo<'_>> = fields
        .iter()
        .filter(|f| f.settings.encrypt.is_some())
        .collect();
    if marked.is_empty() {
        return TokenStream::new();
    }
    let checks = marked.iter().map(|f| {
        let ty = f.ty;
        let cfgs = f.attrs.iter().filter(|a| a.path().is_ident("cfg"));
        // Spanned at the field's type, so a type that cannot be encrypted is reported there.
        quote_spanned! {ty.span()=>
            #(#cfgs)*
            #private::assert_encryptable::<#ty>();
        }
    });
    let names = marked.iter().map(|f| {
        let name = &f.ser_name;
        let cfgs = f.attrs.iter().filter(|a| a.path().is_ident("cfg"));
        quote!(#(#cfgs)* #name)
    });
    quote! {
        fn encrypted_properties() -> &'static [&'static str] {
            #(#checks)*
            &[#(#names),*]
        }
    }
}

/// serde's own derives next to this one would implement `Serialize` or `Deserialize` a second
/// time, and rustc's "conflicting implementations" error does not say which derive to drop.
///
/// A derive sees only the `#[derive(...)]` attributes written after the one that invokes it,
/// so this catches `#[derive(TableEntity)] #[derive(Serialize)]`; serde's traits listed in the
/// same `#[derive(...)]` or an earlier one reach rustc's coherence check instead.
fn refuse_serde_derives(attrs: &[Attribute]) -> Result<()> {
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let paths = attr.parse_args_with(
            syn::punctuated::Punctuated::<Path, syn::Token![,]>::parse_terminated,
        )?;
        for path in paths {
            let Some(last) = path.segments.last() else {
                continue;
            };
            if last.ident == "Serialize" || last.ident == "Deserialize" {
                return Err(Error::new_spanned(
                    &path,
                    format!(
                        "remove `{}` from this #[derive]: #[derive(TableEntity)] implements \
                         serde's `Serialize` and `Deserialize` itself, with the entity's \
                         property names and key fields; field-level #[serde(...)] \
                         attributes still apply",
                        last.ident
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The shadow's copy of a field: its `cfg` and `serde` attributes, plus the property name.
fn shadow_field(field: &FieldInfo<'_>) -> TokenStream {
    let FieldInfo {
        ident,
        ty,
        settings,
        ser_name,
        de_name,
        ..
    } = field;
    let kept = field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("serde") || a.path().is_ident("cfg"));
    let rename = if settings.flatten {
        None
    } else {
        match (&settings.ser_rename, &settings.de_rename) {
            (None, None) => Some(quote!(#[serde(rename = #ser_name)])),
            (Some(_), None) => Some(quote!(#[serde(rename(deserialize = #de_name))])),
            (None, Some(_)) => Some(quote!(#[serde(rename(serialize = #ser_name))])),
            (Some(_), Some(_)) => None,
        }
    };
    quote!(#(#kept)* #rename #ident: #ty)
}

/// A generic parameter as an `impl<...>` declares it: bounds kept, defaults dropped.
fn param_without_default(param: &GenericParam) -> TokenStream {
    match param {
        GenericParam::Type(p) => {
            let (attrs, ident, bounds) = (&p.attrs, &p.ident, &p.bounds);
            let colon = (!bounds.is_empty()).then(|| quote!(:));
            quote!(#(#attrs)* #ident #colon #bounds)
        }
        GenericParam::Const(p) => {
            let (attrs, ident, ty) = (&p.attrs, &p.ident, &p.ty);
            quote!(#(#attrs)* const #ident: #ty)
        }
        GenericParam::Lifetime(p) => quote!(#p),
    }
}

/// The bounds a generic struct's `TableEntity` impl needs: serde for the struct, and what each
/// key placeholder formats. Non-generic structs need none (the bounds either hold
/// or the key code reports the missing trait where the template names the field).
fn entity_predicates(
    type_params: &[&Ident],
    fields: &[FieldInfo<'_>],
    container: &attrs::Container,
    private: &TokenStream,
) -> Vec<TokenStream> {
    if type_params.is_empty() {
        return Vec::new();
    }
    let serde = quote!(#private::serde);
    // Whatever serde needs of the parameters (its inferred bounds, or the struct's `bound`).
    let mut preds = vec![quote!(Self: #serde::Serialize + #serde::de::DeserializeOwned)];
    let templates = [&container.partition_key, &container.row_key];
    for lit in templates.into_iter().flatten() {
        for segment in template::parse(&lit.value()).unwrap_or_default() {
            let Segment::Field { name, format } = segment else {
                continue;
            };
            let Some(field) = fields.iter().find(|f| f.name == name) else {
                continue;
            };
            let ty = field.ty;
            match format {
                Format::Display => preds.push(quote!(#ty: ::core::fmt::Display)),
                Format::Padded(_) => preds.push(quote!(#ty: #private::ZeroPad)),
                Format::Ticks | Format::InvertedTicks => {}
            }
        }
    }
    preds
}

/// The expression building one key from its template.
fn key_builder(lit: &LitStr, fields: &[FieldInfo<'_>], krate: &Path) -> Result<TokenStream> {
    let segments = template::parse(&lit.value()).map_err(|e| Error::new(lit.span(), e))?;
    let private = quote!(#krate::__private);
    let mut steps = Vec::with_capacity(segments.len());
    for segment in segments {
        match segment {
            Segment::Literal(text) => steps.push(quote!(__key.push_str(#text);)),
            Segment::Field { name, format } => {
                let Some(field) = fields.iter().find(|f| f.name == name) else {
                    let known: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
                    return Err(Error::new(
                        lit.span(),
                        format!(
                            "no field `{name}` in this struct; key templates name fields: {}",
                            known.join(", ")
                        ),
                    ));
                };
                if let Some(span) = field.settings.not_written.or(field.settings.not_read) {
                    let mut e = Error::new(
                        lit.span(),
                        format!(
                            "key field `{name}` is skipped by serde: key fields are also stored \
                             as properties, so that a read rebuilds the value"
                        ),
                    );
                    e.combine(Error::new(span, "skipped here"));
                    return Err(e);
                }
                // The field re-spanned at the template, so that a field whose type cannot be
                // formatted this way is reported where the template asks for it (and not
                // across the lines between the attribute and the field).
                let member = if field.ident.to_string().starts_with("r#") {
                    Ident::new_raw(&field.name, lit.span())
                } else {
                    Ident::new(&field.name, lit.span())
                };
                let property = &field.ser_name;
                steps.push(match format {
                    Format::Display => quote_spanned! {lit.span()=>
                        #private::push_display(&mut __key, &self.#member);
                    },
                    Format::Padded(width) => quote_spanned! {lit.span()=>
                        #private::push_padded(&mut __key, &self.#member, #width, #property)?;
                    },
                    Format::Ticks => quote_spanned! {lit.span()=>
                        #private::push_ticks(&mut __key, &self.#member, #property)?;
                    },
                    Format::InvertedTicks => quote_spanned! {lit.span()=>
                        #private::push_inverted_ticks(&mut __key, &self.#member, #property)?;
                    },
                });
            }
        }
    }
    Ok(quote!({
        let mut __key = ::std::string::String::new();
        #(#steps)*
        __key
    }))
}

/// The property constant of a stored field, if it has one.
fn constant(
    field: &FieldInfo<'_>,
    owner: &Ident,
    vis: &syn::Visibility,
    private: &TokenStream,
) -> Option<TokenStream> {
    let settings = &field.settings;
    if settings.not_written.is_some() || settings.flatten {
        return None;
    }
    let name = format_ident!("{}", constant_name(&field.name), span = field.ident.span());
    let property = &field.ser_name;
    let cfgs = field.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let (ty, doc) = match (&settings.property_type, settings.custom_serializer) {
        (Some(ty), _) => (quote!(#ty), String::new()),
        (None, false) => {
            let ty = field.ty;
            (quote!(#ty), String::new())
        }
        (None, true) => (
            quote!(#private::Untyped),
            " Its stored type is set by `#[serde(with)]`, so its comparisons are untyped: give \
             the field `#[table(property_type = \"...\")]` to type them."
                .to_owned(),
        ),
    };
    let doc = format!(
        "The `{property}` property of [`{owner}`] (field `{}`), for filters: \
         `{owner}::{name}.eq(...)`.{doc}",
        field.name
    );
    Some(quote! {
        #(#cfgs)*
        #[doc = #doc]
        #vis const #name: #private::Property<#ty> = #private::Property::new(#property);
    })
}
