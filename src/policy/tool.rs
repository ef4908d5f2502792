//! Tool identity: descriptors, the built-in catalogue, reserved namespaces,
//! and the registry that admits plugin tools.
//!
//! Namespace integrity is checked twice. [`Registry::load_plugin`] refuses a
//! plugin manifest that claims a built-in ID or a reserved prefix *before*
//! the plugin's code is loaded, and [`Registry::route`] repeats the check on
//! every call, so a registration that reached the table some other way (a
//! table restored from an older cache, an in-memory insertion) can never
//! shadow a built-in.

use std::collections::BTreeMap;

use serde::Serialize;

/// The canonical ID of the governed process launcher.
pub const PROCESS_RUN: &str = "process.run";
/// The canonical ID of the shell-text compatibility tool.
pub const BASH: &str = "bash";
/// The legacy alias of [`BASH`].
pub const TOOL_EXEC: &str = "tool.exec";

/// The shell-like policy set: every ID that `untrusted_shell_requires_approval`
/// covers. `process.run` is not an alias of `bash`, but both launch programs.
pub const SHELL_LIKE: [&str; 3] = [BASH, TOOL_EXEC, PROCESS_RUN];

/// ID prefixes that belong to the platform; no plugin may register an ID
/// that starts with one.
pub const RESERVED_PREFIXES: [&str; 8] = [
    "process.",
    "tool.",
    "fs.",
    "web.",
    "custodian.",
    "workspace.",
    "spill.",
    "policy.",
];

/// Longest tool ID, in bytes.
pub const MAX_TOOL_ID_BYTES: usize = 64;

/// The group a tool belongs to; selectors can name a group (`group:NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Group {
    /// Tools that act on the host environment (processes, shells).
    Environment,
    /// Tools that read or write workspace files.
    Filesystem,
    /// Tools that reach the network.
    Web,
    /// Tools contributed by plugins.
    Plugin,
}

impl Group {
    /// Every group.
    pub const ALL: [Group; 4] = [
        Group::Environment,
        Group::Filesystem,
        Group::Web,
        Group::Plugin,
    ];

    /// The group's name in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Group::Environment => "environment",
            Group::Filesystem => "filesystem",
            Group::Web => "web",
            Group::Plugin => "plugin",
        }
    }

    /// The group with this configuration name.
    pub fn from_name(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// How much trust a tool needs; informational for exposure, since
/// `process.run` is held to a stricter rule than its tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolTier {
    /// Read-only, low-risk tools.
    Basic,
    /// Ordinary tools.
    Standard,
    /// Tools that need deliberate opt-in.
    Advanced,
}

/// What policy knows about one tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolDescriptor {
    /// The canonical ID.
    pub id: String,
    /// The tool's group.
    pub group: Group,
    /// The tool's tier.
    pub tier: ToolTier,
    /// Whether calling the tool can change state outside the request.
    pub state_changing: bool,
}

impl ToolDescriptor {
    fn builtin(id: &str, group: Group, tier: ToolTier, state_changing: bool) -> Self {
        ToolDescriptor {
            id: id.to_owned(),
            group,
            tier,
            state_changing,
        }
    }
}

/// The built-in tools, in a fixed order.
pub fn builtins() -> Vec<ToolDescriptor> {
    vec![
        ToolDescriptor::builtin(PROCESS_RUN, Group::Environment, ToolTier::Advanced, true),
        ToolDescriptor::builtin(BASH, Group::Environment, ToolTier::Advanced, true),
        ToolDescriptor::builtin("fs.read", Group::Filesystem, ToolTier::Basic, false),
        ToolDescriptor::builtin("fs.write", Group::Filesystem, ToolTier::Standard, true),
        ToolDescriptor::builtin("web.fetch", Group::Web, ToolTier::Standard, false),
    ]
}

/// Legacy aliases of built-in tools: `(alias, canonical)`.
pub const ALIASES: [(&str, &str); 1] = [(TOOL_EXEC, BASH)];

/// Why a tool ID is not well-formed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum IdError {
    /// Empty or longer than [`MAX_TOOL_ID_BYTES`].
    #[error("a tool ID has 1 to {MAX_TOOL_ID_BYTES} bytes")]
    Length,
    /// Not dot-separated segments of lowercase ASCII letters, digits, `_` and
    /// `-`, each starting with a letter.
    #[error("a tool ID is dot-separated segments of [a-z0-9_-], each starting with a letter")]
    Syntax,
}

/// Checks the syntax of a tool ID.
///
/// IDs are lowercase ASCII so that no case folding or Unicode lookalike can
/// make two spellings of one ID.
///
/// # Errors
///
/// [`IdError`] when the ID is malformed.
pub fn validate_tool_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() || id.len() > MAX_TOOL_ID_BYTES {
        return Err(IdError::Length);
    }
    let well_formed = id.split('.').all(|seg| {
        let mut bytes = seg.bytes();
        matches!(bytes.next(), Some(b'a'..=b'z'))
            && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
    });
    if well_formed {
        Ok(())
    } else {
        Err(IdError::Syntax)
    }
}

/// Whether `id` belongs to the platform: a built-in ID, a built-in alias, or
/// an ID under a reserved prefix.
pub fn is_reserved(id: &str) -> bool {
    builtins().iter().any(|d| d.id == id)
        || ALIASES.iter().any(|(alias, _)| *alias == id)
        || RESERVED_PREFIXES.iter().any(|p| id.starts_with(p))
}

/// Why a plugin contribution was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A contributed ID is malformed.
    #[error("plugin {plugin:?}: tool ID {id:?} is malformed: {source}")]
    InvalidId {
        /// The plugin's name.
        plugin: String,
        /// The offending ID.
        id: String,
        /// What is wrong with it.
        source: IdError,
    },
    /// A contributed ID is a built-in, an alias, or under a reserved prefix.
    #[error("plugin {plugin:?}: tool ID {id:?} is reserved for the platform")]
    Reserved {
        /// The plugin's name.
        plugin: String,
        /// The offending ID.
        id: String,
    },
    /// A contributed ID is already registered, or repeated in the manifest.
    #[error("plugin {plugin:?}: tool ID {id:?} is already registered")]
    Duplicate {
        /// The plugin's name.
        plugin: String,
        /// The offending ID.
        id: String,
    },
}

/// Why a plugin failed to load: refused by the registry (the loader was never
/// called), or by the loader itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError<E: std::error::Error + 'static> {
    /// The manifest was refused before any code was loaded.
    #[error(transparent)]
    Refused(#[from] RegistryError),
    /// The loader failed.
    #[error("the plugin loader failed: {0}")]
    Loader(#[source] E),
}

/// What a plugin declares before any of its code runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginManifest {
    /// The plugin's name.
    pub name: String,
    /// The tools it contributes.
    pub tools: Vec<ToolDescriptor>,
}

/// The seam that loads a plugin's code; the registry calls it only for a
/// manifest it has admitted.
pub trait PluginLoader {
    /// The loaded plugin.
    type Loaded;
    /// The loader's failure.
    type Error: std::error::Error + 'static;
    /// Loads the code behind an admitted manifest.
    ///
    /// # Errors
    ///
    /// Whatever the loader reports; the registry then records nothing.
    fn load(&mut self, manifest: &PluginManifest) -> Result<Self::Loaded, Self::Error>;
}

/// Where a call to a tool ID goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route<'a> {
    /// A built-in tool (aliases resolve to their canonical descriptor).
    Builtin(&'a ToolDescriptor),
    /// A plugin tool.
    Plugin {
        /// The plugin's name.
        plugin: &'a str,
        /// The tool.
        tool: &'a ToolDescriptor,
    },
}

impl Route<'_> {
    /// The descriptor the call resolves to.
    pub fn descriptor(&self) -> &ToolDescriptor {
        match self {
            Route::Builtin(d) => d,
            Route::Plugin { tool, .. } => tool,
        }
    }
}

/// Why a call could not be routed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RouteError {
    /// The requested ID is malformed.
    #[error("the tool ID is malformed")]
    InvalidId,
    /// A plugin registration claims a reserved ID; it is refused at execution
    /// time as it would have been at load time.
    #[error("a plugin registration claims the reserved ID {id:?}")]
    ReservedRegistration {
        /// The reserved ID.
        id: String,
    },
    /// No tool has this ID.
    #[error("no tool is registered as {id:?}")]
    Unknown {
        /// The requested ID.
        id: String,
    },
}

/// The built-in tools plus admitted plugin tools.
#[derive(Clone, Debug)]
pub struct Registry {
    builtins: Vec<ToolDescriptor>,
    plugins: BTreeMap<String, (String, ToolDescriptor)>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// A registry with the built-in tools and no plugin.
    pub fn new() -> Self {
        Registry {
            builtins: builtins(),
            plugins: BTreeMap::new(),
        }
    }

    /// Restores a plugin table as it was persisted or held in memory,
    /// *without* checking it (it may predate today's reserved prefixes).
    /// [`Registry::route`] re-checks every entry it would route to.
    pub fn restore_unchecked(entries: impl IntoIterator<Item = (String, ToolDescriptor)>) -> Self {
        let mut registry = Registry::new();
        for (plugin, tool) in entries {
            registry.plugins.insert(tool.id.clone(), (plugin, tool));
        }
        registry
    }

    /// Checks a manifest against the namespace rules and the current table.
    ///
    /// # Errors
    ///
    /// The first contributed ID that is malformed, reserved or taken.
    pub fn check_manifest(&self, manifest: &PluginManifest) -> Result<(), RegistryError> {
        let mut seen = std::collections::BTreeSet::new();
        for tool in &manifest.tools {
            let plugin = || manifest.name.clone();
            let id = || tool.id.clone();
            if let Err(source) = validate_tool_id(&tool.id) {
                return Err(RegistryError::InvalidId {
                    plugin: plugin(),
                    id: id(),
                    source,
                });
            }
            if is_reserved(&tool.id) {
                return Err(RegistryError::Reserved {
                    plugin: plugin(),
                    id: id(),
                });
            }
            if self.plugins.contains_key(&tool.id) || !seen.insert(tool.id.as_str()) {
                return Err(RegistryError::Duplicate {
                    plugin: plugin(),
                    id: id(),
                });
            }
        }
        Ok(())
    }

    /// Admits a plugin: checks its manifest, and only then asks `loader` to
    /// load its code; records its tools once the loader succeeds.
    ///
    /// # Errors
    ///
    /// [`LoadError::Refused`] (the loader is never called) or
    /// [`LoadError::Loader`] (nothing is recorded).
    pub fn load_plugin<L: PluginLoader>(
        &mut self,
        manifest: PluginManifest,
        loader: &mut L,
    ) -> Result<L::Loaded, LoadError<L::Error>> {
        self.check_manifest(&manifest)?;
        let loaded = loader.load(&manifest).map_err(LoadError::Loader)?;
        for tool in manifest.tools {
            self.plugins
                .insert(tool.id.clone(), (manifest.name.clone(), tool));
        }
        Ok(loaded)
    }

    /// Routes a call to `id`, repeating the namespace check at execution
    /// time: built-in IDs and aliases always route to the built-in, and a
    /// plugin entry under a reserved ID is refused.
    ///
    /// # Errors
    ///
    /// [`RouteError`] when the ID is malformed, reserved for a tool that does
    /// not exist, or unknown.
    pub fn route(&self, id: &str) -> Result<Route<'_>, RouteError> {
        validate_tool_id(id).map_err(|_| RouteError::InvalidId)?;
        let canonical = ALIASES
            .iter()
            .find(|(alias, _)| *alias == id)
            .map_or(id, |(_, canonical)| canonical);
        if let Some(d) = self.builtins.iter().find(|d| d.id == canonical) {
            return Ok(Route::Builtin(d));
        }
        if is_reserved(id) {
            return Err(if self.plugins.contains_key(id) {
                RouteError::ReservedRegistration { id: id.to_owned() }
            } else {
                RouteError::Unknown { id: id.to_owned() }
            });
        }
        match self.plugins.get(id) {
            Some((plugin, tool)) => Ok(Route::Plugin { plugin, tool }),
            None => Err(RouteError::Unknown { id: id.to_owned() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct CountingLoader {
        loads: usize,
        fail: bool,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    impl PluginLoader for CountingLoader {
        type Loaded = usize;
        type Error = Boom;
        fn load(&mut self, _: &PluginManifest) -> Result<usize, Boom> {
            self.loads += 1;
            if self.fail { Err(Boom) } else { Ok(self.loads) }
        }
    }

    fn tool(id: &str) -> ToolDescriptor {
        ToolDescriptor {
            id: id.to_owned(),
            group: Group::Plugin,
            tier: ToolTier::Standard,
            state_changing: false,
        }
    }

    fn manifest(ids: &[&str]) -> PluginManifest {
        PluginManifest {
            name: "acme".into(),
            tools: ids.iter().map(|id| tool(id)).collect(),
        }
    }

    #[test]
    fn process_run_descriptor() {
        let r = Registry::new();
        let d = r.route(PROCESS_RUN).unwrap().descriptor().clone();
        assert_eq!(d.group, Group::Environment);
        assert_eq!(d.tier, ToolTier::Advanced);
        assert!(d.state_changing);
    }

    #[test]
    fn reserved_contributions_are_refused_before_code_loads() {
        for id in [
            PROCESS_RUN,
            "process.spawn",
            BASH,
            TOOL_EXEC,
            "fs.delete",
            "custodian.x",
        ] {
            let mut r = Registry::new();
            let mut loader = CountingLoader::default();
            let err = r
                .load_plugin(manifest(&["acme.ok", id]), &mut loader)
                .unwrap_err();
            assert!(
                matches!(err, LoadError::Refused(RegistryError::Reserved { .. })),
                "{id}: {err}"
            );
            assert_eq!(loader.loads, 0, "{id}: loader ran for a refused manifest");
            assert!(
                r.route("acme.ok").is_err(),
                "nothing is recorded on refusal"
            );
        }
    }

    #[test]
    fn malformed_and_duplicate_contributions_are_refused() {
        let mut r = Registry::new();
        let mut loader = CountingLoader::default();
        for bad in ["Process.run", "pr\u{43e}cess.run", "", "a..b", ".a", "a b"] {
            let err = r.load_plugin(manifest(&[bad]), &mut loader).unwrap_err();
            assert!(
                matches!(err, LoadError::Refused(RegistryError::InvalidId { .. })),
                "{bad:?}"
            );
        }
        let err = r
            .load_plugin(manifest(&["acme.a", "acme.a"]), &mut loader)
            .unwrap_err();
        assert!(matches!(
            err,
            LoadError::Refused(RegistryError::Duplicate { .. })
        ));
        r.load_plugin(manifest(&["acme.a"]), &mut loader).unwrap();
        let err = r
            .load_plugin(manifest(&["acme.a"]), &mut loader)
            .unwrap_err();
        assert!(matches!(
            err,
            LoadError::Refused(RegistryError::Duplicate { .. })
        ));
        assert_eq!(loader.loads, 1);
    }

    #[test]
    fn admitted_plugin_routes_after_loading() {
        let mut r = Registry::new();
        let mut loader = CountingLoader::default();
        assert_eq!(
            r.load_plugin(manifest(&["acme.deploy"]), &mut loader)
                .unwrap(),
            1
        );
        assert!(matches!(
            r.route("acme.deploy").unwrap(),
            Route::Plugin { plugin: "acme", .. }
        ));
    }

    #[test]
    fn loader_failure_records_nothing() {
        let mut r = Registry::new();
        let mut loader = CountingLoader {
            fail: true,
            ..Default::default()
        };
        assert!(matches!(
            r.load_plugin(manifest(&["acme.deploy"]), &mut loader),
            Err(LoadError::Loader(Boom))
        ));
        assert!(r.route("acme.deploy").is_err());
    }

    #[test]
    fn routing_repeats_the_refusal_for_stale_registrations() {
        let r = Registry::restore_unchecked([
            ("evil".to_owned(), tool(PROCESS_RUN)),
            ("evil".to_owned(), tool(TOOL_EXEC)),
            ("evil".to_owned(), tool("process.spawn")),
            ("acme".to_owned(), tool("acme.ok")),
        ]);
        assert!(matches!(r.route(PROCESS_RUN).unwrap(), Route::Builtin(d) if d.id == PROCESS_RUN));
        assert!(matches!(r.route(TOOL_EXEC).unwrap(), Route::Builtin(d) if d.id == BASH));
        assert_eq!(
            r.route("process.spawn"),
            Err(RouteError::ReservedRegistration {
                id: "process.spawn".into()
            })
        );
        assert!(r.route("acme.ok").is_ok());
        assert_eq!(r.route("Process.run"), Err(RouteError::InvalidId));
        assert_eq!(
            r.route("acme.nope"),
            Err(RouteError::Unknown {
                id: "acme.nope".into()
            })
        );
    }
}
