// Module resolve hook for the generated client in gen/ts.
//
// gen/ts sits outside this npm package, so Node cannot find the runtime packages the generated code
// imports (@bufbuild/protobuf) by walking up from gen/ts. For importers under gen/ts only, bare
// specifiers are resolved as if imported from this package, which also keeps one @bufbuild/protobuf
// instance shared by the generated code and @connectrpc/connect. Registered by admin.test.mjs.
const genRoot = new URL("../../gen/ts/", import.meta.url).href;
const thisPackage = new URL("./package.json", import.meta.url).href;

function isBare(specifier) {
  return !/^(\.{0,2}\/|[a-z][a-z0-9+.-]*:)/i.test(specifier);
}

export async function resolve(specifier, context, nextResolve) {
  if (context.parentURL?.startsWith(genRoot) && isBare(specifier)) {
    return nextResolve(specifier, { ...context, parentURL: thisPackage });
  }
  return nextResolve(specifier, context);
}
