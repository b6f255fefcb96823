//! The `#[table(...)]` attributes, and the parts of `#[serde(...)]` the derive must understand.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, LitStr, Path, Result, Token, Type, WherePredicate};

use crate::naming::Casing;

/// The struct-level settings.
pub(crate) struct Container {
    pub(crate) partition_key: Option<LitStr>,
    pub(crate) row_key: Option<LitStr>,
    pub(crate) casing: Casing,
    /// The path of tablekit-core in the generated code.
    pub(crate) krate: Path,
    /// Whether a `#[serde(rename = "...")]` names the struct already.
    pub(crate) serde_renamed: bool,
    /// `#[serde(bound = "...")]` or `bound(serialize = "...")`: replaces the inferred bounds of
    /// the `Serialize` impl, in serde's impl and in the forwarding one alike.
    pub(crate) ser_bound: Option<TokenStream>,
    /// The same for `Deserialize`.
    pub(crate) de_bound: Option<TokenStream>,
}

/// Container-level serde attributes that would change the struct's shape (so property names
/// and constants would no longer match what is stored), or that the derive sets itself.
const REFUSED_CONTAINER_SERDE: [(&str, &str); 8] = [
    (
        "rename_all",
        "use #[table(rename_all = \"...\")]: it also names the property constants",
    ),
    ("rename_all_fields", "it applies to enums only"),
    (
        "remote",
        "#[derive(TableEntity)] implements serde for the struct itself",
    ),
    ("crate", "use #[table(crate = \"...\")]"),
    ("transparent", "an entity is a struct of properties"),
    ("from", "an entity is read as the struct itself"),
    ("try_from", "an entity is read as the struct itself"),
    ("into", "an entity is written as the struct itself"),
];

pub(crate) fn container(attrs: &[Attribute]) -> Result<Container> {
    let mut partition_key = None;
    let mut row_key = None;
    let mut casing = None;
    let mut krate = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("table")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("partition_key") {
                set_once(&meta, &mut partition_key, meta.value()?.parse::<LitStr>()?)
            } else if meta.path.is_ident("row_key") {
                set_once(&meta, &mut row_key, meta.value()?.parse::<LitStr>()?)
            } else if meta.path.is_ident("rename_all") {
                let lit: LitStr = meta.value()?.parse()?;
                let rule = Casing::parse(&lit.value()).map_err(|e| Error::new(lit.span(), e))?;
                set_once(&meta, &mut casing, rule)
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                set_once(&meta, &mut krate, lit.parse::<Path>()?)
            } else if ["property_type", "encrypt", "sign", "plain"]
                .iter()
                .any(|name| meta.path.is_ident(name))
            {
                Err(meta.error("this attribute goes on a field, not on the struct"))
            } else {
                Err(meta.error(
                    "unknown table attribute; the struct takes partition_key, row_key, \
                     rename_all and crate",
                ))
            }
        })?;
    }
    let mut serde_renamed = false;
    let mut ser_bound = None;
    let mut de_bound = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if let Some((name, reason)) = REFUSED_CONTAINER_SERDE
                .iter()
                .find(|(name, _)| meta.path.is_ident(name))
            {
                return Err(meta.error(format!(
                    "#[serde({name})] is not supported on a TableEntity: {reason}"
                )));
            }
            if meta.path.is_ident("rename") {
                serde_renamed = true;
            }
            if meta.path.is_ident("bound") {
                if meta.input.peek(Token![=]) {
                    let bound = predicates(&meta.value()?.parse()?)?;
                    ser_bound = Some(bound.clone());
                    de_bound = Some(bound);
                    return Ok(());
                }
                return meta.parse_nested_meta(|inner| {
                    let bound = predicates(&inner.value()?.parse()?)?;
                    if inner.path.is_ident("serialize") {
                        ser_bound = Some(bound);
                    } else if inner.path.is_ident("deserialize") {
                        de_bound = Some(bound);
                    }
                    Ok(())
                });
            }
            skip_value(meta.input)
        })?;
    }
    Ok(Container {
        partition_key,
        row_key,
        casing: casing.unwrap_or(Casing::Pascal),
        krate: krate.unwrap_or_else(|| syn::parse_quote!(::tablekit::core)),
        serde_renamed,
        ser_bound,
        de_bound,
    })
}

/// The where-predicates of a serde `bound` string, as tokens ending in a comma.
fn predicates(lit: &LitStr) -> Result<TokenStream> {
    let parsed = lit.parse_with(Punctuated::<WherePredicate, Token![,]>::parse_terminated)?;
    let mut tokens = TokenStream::new();
    for predicate in parsed {
        predicate.to_tokens(&mut tokens);
        <Token![,]>::default().to_tokens(&mut tokens);
    }
    Ok(tokens)
}

/// What the derive needs to know of a field's attributes.
#[derive(Default)]
pub(crate) struct Field {
    /// `#[serde(rename = "x")]` or `rename(serialize = "x")`.
    pub(crate) ser_rename: Option<LitStr>,
    /// `#[serde(rename = "x")]` or `rename(deserialize = "x")`.
    pub(crate) de_rename: Option<LitStr>,
    /// Not written (`skip`, `skip_serializing`): no property, no constant.
    pub(crate) not_written: Option<Span>,
    /// Not read (`skip`, `skip_deserializing`).
    pub(crate) not_read: Option<Span>,
    /// `flatten`: its properties are the inner type's.
    pub(crate) flatten: bool,
    /// `with` or `serialize_with`: the stored type is not the field's type.
    pub(crate) custom_serializer: bool,
    /// `#[table(property_type = "T")]`.
    pub(crate) property_type: Option<Type>,
    /// `#[table(encrypt)]`: stored encrypted by client-side encryption.
    pub(crate) encrypt: Option<Span>,
    /// `#[table(sign)]`: stored as written, covered by client-side encryption's item
    /// signature.
    pub(crate) sign: Option<Span>,
    /// `#[table(plain)]`: classified as stored as written, unsigned.
    pub(crate) plain: Option<Span>,
    /// `#[serde(alias = "x")]`: also read from another property.
    pub(crate) alias: Option<Span>,
}

pub(crate) fn field(attrs: &[Attribute]) -> Result<Field> {
    let mut out = Field::default();
    for attr in attrs {
        if attr.path().is_ident("table") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("property_type") {
                    let lit: LitStr = meta.value()?.parse()?;
                    let ty = lit.parse::<Type>()?;
                    set_once(&meta, &mut out.property_type, ty)
                } else if let Some(slot) = [
                    ("encrypt", &mut out.encrypt),
                    ("sign", &mut out.sign),
                    ("plain", &mut out.plain),
                ]
                .into_iter()
                .find_map(|(name, slot)| meta.path.is_ident(name).then_some(slot))
                {
                    let span = meta
                        .path
                        .get_ident()
                        .map_or_else(Span::call_site, |i| i.span());
                    set_once(&meta, slot, span)
                } else {
                    Err(meta.error(
                        "unknown table attribute; a field takes property_type = \"Type\", \
                         encrypt, sign and plain (keys are set on the struct)",
                    ))
                }
            })?;
        } else if attr.path().is_ident("serde") {
            attr.parse_nested_meta(|meta| serde_field_meta(&meta, &mut out))?;
        }
    }
    Ok(out)
}

fn serde_field_meta(meta: &ParseNestedMeta<'_>, out: &mut Field) -> Result<()> {
    let span = meta
        .path
        .get_ident()
        .map_or_else(Span::call_site, |i| i.span());
    if meta.path.is_ident("rename") {
        if meta.input.peek(Token![=]) {
            let lit: LitStr = meta.value()?.parse()?;
            out.ser_rename = Some(LitStr::new(&lit.value(), lit.span()));
            out.de_rename = Some(lit);
            Ok(())
        } else {
            meta.parse_nested_meta(|inner| {
                let lit: LitStr = inner.value()?.parse()?;
                if inner.path.is_ident("serialize") {
                    out.ser_rename = Some(lit);
                } else if inner.path.is_ident("deserialize") {
                    out.de_rename = Some(lit);
                }
                Ok(())
            })
        }
    } else if meta.path.is_ident("skip") {
        out.not_written = Some(span);
        out.not_read = Some(span);
        Ok(())
    } else if meta.path.is_ident("skip_serializing") {
        out.not_written = Some(span);
        Ok(())
    } else if meta.path.is_ident("skip_deserializing") {
        out.not_read = Some(span);
        Ok(())
    } else if meta.path.is_ident("flatten") {
        out.flatten = true;
        Ok(())
    } else if meta.path.is_ident("alias") {
        out.alias = Some(span);
        skip_value(meta.input)
    } else {
        if meta.path.is_ident("with") || meta.path.is_ident("serialize_with") {
            out.custom_serializer = true;
        }
        skip_value(meta.input)
    }
}

/// Consumes the rest of one nested meta item (`= value` or `(...)`) that only serde reads.
fn skip_value(input: ParseStream<'_>) -> Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

fn set_once<T>(meta: &ParseNestedMeta<'_>, slot: &mut Option<T>, value: T) -> Result<()> {
    if slot.is_some() {
        return Err(meta.error("duplicate table attribute"));
    }
    *slot = Some(value);
    Ok(())
}
