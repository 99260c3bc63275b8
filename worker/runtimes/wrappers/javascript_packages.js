// Kiln's javascript wrappers, shared part (docs/runtimes.md, "Packages on
// request"): embedded at configure time (worker/runtimes/sources.cmake) into
// javascript_oneshot.js and javascript_session.js where they say
// `// kiln-include: javascript_packages.js`, inside their closure, with `fs`
// and `proc` in scope. Defines usePackages(), called before each job or
// execution, useProxy(), called once its env is set, and dynamicImport, the
// importModuleDynamically of the code's vm.Script.
  // Packages on request: the worker mounts the job's set at /packages
  // (otherwise an empty folder). Bare names resolve there before the package
  // set at /node_modules: require() through this module's lookup paths,
  // import() through a module the worker wrote at the set's root.
  const PACKAGES = '/packages';
  // The [eval] module whose require the code uses, kept now: once the driver's
  // synchronous start is over, node rebinds the global `module`.
  const evalModule = module;
  let packagesSeen = null;
  const usePackages = () => {
    let st;
    try {
      st = fs.statSync(PACKAGES);
    } catch (_) {
      return;
    }
    const key = st.dev + ':' + st.ino;
    if (key === packagesSeen) return;
    packagesSeen = key;
    const nm = PACKAGES + '/node_modules';
    if (fs.existsSync(nm) && !evalModule.paths.includes(nm)) {
      const at = evalModule.paths.indexOf('/node_modules');
      evalModule.paths.splice(at < 0 ? evalModule.paths.length : at, 0, nm);
    }
  };
  // Network on request: the worker's egress gateway, named by HTTPS_PROXY, is
  // the job's only way out. Node's fetch does not read the proxy variables,
  // so the package set's undici (the library behind node's fetch) gives it a
  // global dispatcher that does; curl, python and others read them anyway.
  let proxyUsed = false;
  const useProxy = () => {
    if (proxyUsed || !proc.env.HTTPS_PROXY) return;
    proxyUsed = true;
    try {
      const undici = evalModule.require('undici');
      undici.setGlobalDispatcher(new undici.EnvHttpProxyAgent());
    } catch (e) {
      fs.writeSync(2, 'kiln: fetch() cannot use the network gateway: ' + e.message + '\n');
    }
  };
  const packageOf = (s) => {  // 'a/b' -> 'a', '@s/a/b' -> '@s/a'; null unless a bare name
    if (typeof s !== 'string' || /^(\.|\/|[a-zA-Z][a-zA-Z0-9+.-]*:)/.test(s)) return null;
    const parts = s.split('/');
    return s[0] === '@' ? parts.slice(0, 2).join('/') : parts[0];
  };
  // import() in the code: resolved from /workspace, so bare names find
  // /workspace/node_modules, then the package set at /node_modules (node runs
  // with --experimental-vm-modules, which Node 20 needs for this option).
  const dynamicImport = (specifier) => {
    const name = packageOf(specifier);
    if (name && fs.existsSync(PACKAGES + '/node_modules/' + name)) {
      return import(PACKAGES + '/.kiln-import.mjs').then((m) => m.default(specifier));
    }
    return import(specifier);
  };
