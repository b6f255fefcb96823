//! Newtype-struct names through which tablekit's own serializer and deserializer exchange
//! EDM type information that serde's data model cannot carry. Other serializers see an
//! ordinary newtype and stay unaffected.

/// Forces `Edm.Binary` (see [`super::Binary`]).
pub(crate) const BINARY_MARKER: &str = "$tablekit::edm::Binary";
/// Asks the deserializer for a `(type name, value)` pair (see [`super::EdmValue`]).
pub(crate) const EDM_VALUE_MARKER: &str = "$tablekit::edm::EdmValue";
