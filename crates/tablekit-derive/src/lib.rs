#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod attrs;
mod expand;
mod naming;
mod template;

/// Implements `TableEntity`, `Serialize` and `Deserialize` for a struct with named fields, and
/// adds one typed property constant per stored field.
///
/// The [crate documentation](crate) describes the attributes:
/// `#[table(partition_key = "...", row_key = "...")]` (required), `#[table(rename_all =
/// "...")]`, `#[table(crate = "...")]`, and on fields `#[table(property_type = "...")]`,
/// `#[table(encrypt)]` (a string property client-side encryption stores encrypted),
/// `#[table(sign)]` (stored as written, covered by its item signature) and `#[table(plain)]`
/// (stored as written, unsigned); the last two are listed by the inherent functions
/// `signed_properties()` and `plain_properties()`.
/// Field-level `#[serde(...)]` attributes apply as usual; do not also derive serde's traits.
///
/// # Examples
/// ```
/// use tablekit::TableEntity;
/// use tablekit::core::{Keys, TableEntity as _};
///
/// #[derive(TableEntity)]
/// #[table(partition_key = "{department}", row_key = "empid_{id:06}")]
/// struct Employee {
///     department: String,
///     id: u32,
///     email: String,
/// }
///
/// let e = Employee { department: "Sales".into(), id: 223, email: "jonesj@contoso.com".into() };
/// assert_eq!(e.keys()?, Keys::new("Sales", "empid_000223")?);
/// assert_eq!(Employee::EMAIL.name(), "Email");
/// assert_eq!(Employee::ID.ge(100).render()?, "Id ge 100L");
/// # Ok::<(), tablekit::core::Error>(())
/// ```
#[proc_macro_derive(TableEntity, attributes(table, serde))]
pub fn derive_table_entity(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
