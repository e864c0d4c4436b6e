//! Registry errors with Confluent Schema Registry's `error_code` numbers and HTTP statuses, so
//! its clients recognise them.

/// Why a registry operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// 40401.
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    /// 40402.
    #[error("Version {0} not found.")]
    VersionNotFound(String),
    /// 40403.
    #[error("Schema {0} not found")]
    SchemaNotFound(String),
    /// 40404.
    #[error("Subject '{0}' was soft deleted.Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    /// 40405.
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    /// 40406.
    #[error("Subject '{0}' Version {1} was soft deleted.Set permanent=true to delete permanently")]
    VersionSoftDeleted(String, u32),
    /// 40407.
    #[error("Subject '{0}' Version {1} was not deleted first before being permanently deleted")]
    VersionNotSoftDeleted(String, u32),
    /// 40408.
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectConfigNotFound(String),
    /// 40409.
    #[error("Subject '{0}' does not have subject-level mode configured")]
    SubjectModeNotFound(String),
    /// 409: every incompatibility found.
    #[error("Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]", .messages.join(", "))]
    Incompatible {
        /// The subject.
        subject: String,
        /// One line per incompatibility.
        messages: Vec<String>,
    },
    /// 42201.
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    /// 42202.
    #[error("The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"")]
    InvalidVersion(String),
    /// 42203.
    #[error("Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")]
    InvalidCompatibility,
    /// 42204.
    #[error("Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.")]
    InvalidMode,
    /// 42205: the subject's mode (or an id clash in IMPORT mode) forbids the operation.
    #[error("{0}")]
    NotPermitted(String),
    /// 42206: a schema version other schemas refer to cannot be deleted.
    #[error("One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={0},version={1}}}.")]
    ReferenceExists(String, u32),
    /// 422: the request body was not understood.
    #[error("{0}")]
    InvalidRequest(String),
    /// 42205: a registry limit was reached.
    #[error("{0}")]
    LimitReached(String),
    /// 50001: the registry file could not be written.
    #[error("Error in the backend data store: {0}")]
    Storage(String),
}

impl RegistryError {
    /// Confluent's `error_code`.
    pub fn error_code(&self) -> u32 {
        match self {
            Self::SubjectNotFound(_) => 40401,
            Self::VersionNotFound(_) => 40402,
            Self::SchemaNotFound(_) => 40403,
            Self::SubjectSoftDeleted(_) => 40404,
            Self::SubjectNotSoftDeleted(_) => 40405,
            Self::VersionSoftDeleted(..) => 40406,
            Self::VersionNotSoftDeleted(..) => 40407,
            Self::SubjectConfigNotFound(_) => 40408,
            Self::SubjectModeNotFound(_) => 40409,
            Self::Incompatible { .. } => 409,
            Self::InvalidSchema(_) => 42201,
            Self::InvalidVersion(_) => 42202,
            Self::InvalidCompatibility => 42203,
            Self::InvalidMode => 42204,
            Self::NotPermitted(_) => 42205,
            Self::ReferenceExists(..) => 42206,
            Self::InvalidRequest(_) => 422,
            Self::LimitReached(_) => 42205,
            Self::Storage(_) => 50001,
        }
    }

    /// The HTTP status Confluent answers with.
    pub fn http_status(&self) -> u16 {
        match self.error_code() {
            409 => 409,
            422 => 422,
            code if code >= 50000 => 500,
            code if code >= 42200 => 422,
            _ => 404,
        }
    }

    /// Confluent's error body: `{"error_code": ..., "message": ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "error_code": self.error_code(), "message": self.to_string() })
    }
}
