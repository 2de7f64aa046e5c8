"""Test cases for the patch module; gen.py builds each with kubectl kustomize."""

import json

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  finalizers: [a, b]
  labels: {drop: me, keep: me}
  annotations: {a: b}
spec:
  strategy:
    type: Recreate
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: app:1
        args: [x, y]
        env:
        - name: A
          value: a
        - name: B
          value: b
        ports:
        - containerPort: 8080
        volumeMounts:
        - mountPath: /data
          name: data
      - name: other
        image: o
      initContainers:
      - name: init
        image: busybox
      tolerations:
      - key: k1
        operator: Exists
      volumes:
      - name: data
        emptyDir: {}
      imagePullSecrets:
      - name: s1
      hostAliases:
      - ip: 1.2.3.4
        hostnames: [a]
"""


def smp(name, resources, *patches):
    return {"name": name, "kind": "patches", "resources": resources,
            "kustomization": {"patches": [{"patch": p} for p in patches]}}


def targeted(name, resources, *pairs):
    def text(p):
        if isinstance(p, str):
            return p
        return json.dumps(p)
    return {"name": name, "kind": "patches", "resources": resources,
            "kustomization": {"patches": [{"patch": text(p), "target": t} for (p, t) in pairs]}}


HEAD = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"

CASES = [
    smp("smp_containers_env_ports_finalizers", DEPLOY, HEAD + """  finalizers: [c, a]
spec:
  template:
    spec:
      containers:
      - name: side
        image: side:1
      - name: app
        env:
        - name: NEW
          value: "1"
        - name: A
          $patch: delete
        ports:
        - containerPort: 9090
        volumeMounts:
        - mountPath: /data
          readOnly: true
        - mountPath: /extra
          name: extra
      tolerations:
      - key: k2
      volumes:
      - name: v2
        emptyDir: {}
      imagePullSecrets:
      - name: s2
      hostAliases:
      - ip: 1.2.3.4
        hostnames: [b]
      - ip: 5.6.7.8
        hostnames: [c]
"""),
    smp("smp_directives", DEPLOY, HEAD + """  labels:
    drop: null
  annotations:
    $patch: replace
    only: this
spec:
  $retainKeys: [template]
  $deleteFromPrimitiveList/foo: [x]
  strategy:
    $patch: delete
  template:
    spec:
      $setElementOrder/containers:
      - name: other
      - name: app
      containers:
      - name: other
        $patch: delete
      - name: app
        $patch: replace
        image: new
      - name: brand-new
        $patch: replace
        image: bn
      volumes:
      - $patch: replace
      - name: only
"""),
    smp("smp_list_delete_and_merge_directive", DEPLOY, HEAD + """spec:
  template:
    spec:
      initContainers:
      - $patch: delete
      containers:
      - $patch: merge
      - name: app
        image: app:2
"""),
    smp("smp_nulls", DEPLOY, HEAD + """spec:
  replicas: null
  strategy: null
  template:
    spec:
      containers:
      - name: app
        args: null
        image: app:3
        resources:
          limits: {cpu: "1"}
          requests: null
      - name: fresh
        image: f
        command: null
        securityContext:
          runAsUser: 1
          privileged: null
"""),
    smp("smp_type_mismatch_error", DEPLOY, HEAD + """spec:
  strategy: recreate
"""),
    smp("smp_top_level_delete", DEPLOY + """---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gone
data: {a: b}
""", """apiVersion: v1
kind: ConfigMap
metadata:
  name: gone
$patch: delete
"""),
    smp("smp_crd_lists_replaced", """
apiVersion: example.com/v1
kind: Foo
metadata:
  name: foo
  finalizers: [a]
spec:
  items:
  - name: a
    v: 1
  m: {x: 1, y: 2}
  deep:
    list: [1, 2]
""", """apiVersion: example.com/v1
kind: Foo
metadata:
  name: foo
  finalizers: [b]
spec:
  items:
  - name: b
    v: 2
  m:
    x: null
    z: 3
  deep:
    list: [3]
"""),
    smp("smp_multikey_ports", """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      containers:
      - name: app
        ports:
        - containerPort: 8080
          protocol: TCP
          name: http
        - containerPort: 9000
          name: x
        - containerPort: 7000
          name: seven
---
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 80
    protocol: TCP
    targetPort: 8080
  - port: 443
    targetPort: 8443
""", HEAD + """spec:
  template:
    spec:
      containers:
      - name: app
        ports:
        - containerPort: 8080
          name: web
        - containerPort: 9000
          protocol: UDP
          name: u
        - containerPort: 7000
          name: n
""", """apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 80
    targetPort: 8081
  - port: 443
    protocol: TCP
    targetPort: 9443
"""),
    smp("smp_ports_same_protocol", """
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 80
    protocol: TCP
    targetPort: 8080
  - port: 81
    protocol: TCP
    targetPort: 8081
""", """apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 81
    protocol: TCP
    targetPort: 9999
  - port: 82
    protocol: UDP
    targetPort: 82
"""),
    smp("smp_ports_no_protocol", """
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 80
    targetPort: 8080
  - port: 81
    targetPort: 8081
""", """apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - port: 81
    targetPort: 9999
    name: x
  - port: 82
"""),
    smp("smp_cronjob_and_statefulset", """
apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: c
            image: c:1
            env:
            - name: A
              value: a
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ss
spec:
  template:
    spec:
      containers:
      - name: c
        image: c:1
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
""", """apiVersion: batch/v1
kind: CronJob
metadata:
  name: cj
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: c
            env:
            - name: B
              value: b
          - name: d
            image: d
""", """apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ss
spec:
  template:
    spec:
      containers:
      - name: c
        image: c:2
  volumeClaimTemplates:
  - metadata:
      name: other
"""),
    smp("smp_rbac_rules_replaced", """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: r
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: rb
  namespace: ns
subjects:
- kind: ServiceAccount
  name: a
roleRef:
  kind: ClusterRole
  name: r
  apiGroup: rbac.authorization.k8s.io
""", """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: r
rules:
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list]
""", """apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: rb
  namespace: ns
subjects:
- kind: ServiceAccount
  name: b
"""),
    smp("smp_primitive_union_dupes", """
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  finalizers: [x, y, x]
  ownerReferences:
  - uid: u1
    name: o1
    kind: K
    apiVersion: v1
""", """apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  finalizers: [z, y]
  ownerReferences:
  - uid: u2
    name: o2
    kind: K
    apiVersion: v1
  - uid: u1
    name: renamed
"""),
    smp("smp_element_without_key", DEPLOY, HEAD + """spec:
  template:
    spec:
      containers:
      - image: nokey
"""),
    smp("smp_new_list_with_directives", """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      containers:
      - name: app
        image: a
""", HEAD + """spec:
  template:
    spec:
      volumes:
      - name: v1
        emptyDir: {}
        secret: null
      - name: v1
        hostPath: {path: /x}
      containers:
      - name: app
        env:
        - name: X
          value: x
        - name: X
          value: y
"""),
    smp("smp_unknown_directive_error", DEPLOY, HEAD + """spec:
  template:
    $patch: frobnicate
"""),
    targeted("select_name_regex_and_labels", """
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels: {tier: web, env: prod}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: my-app-config
  labels: {tier: db}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: other
  labels: {tier: web}
  annotations: {owner: team-a}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-config
  labels: {tier: web}
""",
        ([{'op': 'add', 'path': '/metadata/annotations', 'value': {'hit1': 'yes'}}], {"kind": "ConfigMap", "name": "app.*"}),
        ([{'op': 'add', 'path': '/data', 'value': {'hit2': 'yes'}}], {"labelSelector": "tier in (web,cache),env!=dev"}),
        ([{'op': 'add', 'path': '/metadata/labels/hit3', 'value': 'yes'}], {"namespace": "default"}),
        ([{'op': 'add', 'path': '/metadata/labels/hit4', 'value': 'yes'}], {"annotationSelector": "owner", "namespace": "oth.*"}),
        ([{'op': 'add', 'path': '/metadata/labels/hit5', 'value': 'yes'}], {"labelSelector": "!env", "group": "apps|"}),
        ([{'op': 'add', 'path': '/metadata/labels/hit6', 'value': 'yes'}], {"version": "v1", "kind": "Config.*", "labelSelector": "tier notin (web)"}),
    ),
    targeted("json6902_ops", """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  annotations:
    a/b: slash
    t~x: tilde
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: app
        image: app:1
        args: [a, b, c]
""", ("""
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: d
- op: add
  path: /spec/template/spec/containers/0/args/0
  value: first
- op: replace
  path: /spec/replicas
  value: 3
- op: remove
  path: /metadata/annotations/a~1b
- op: replace
  path: /metadata/annotations/t~0x
  value: changed
- op: copy
  from: /spec/template/spec/containers/0/image
  path: /metadata/annotations/image
- op: move
  from: /spec/template/spec/containers/0/args/1
  path: /metadata/annotations/moved
- op: test
  path: /spec/replicas
  value: 3
- op: add
  path: /spec/template/spec/containers/0/args/-1
  value: beforelast
- op: remove
  path: /spec/template/spec/containers/0/args/-1
""", {"kind": "Deployment"})),
    targeted("json6902_replace_missing_adds", DEPLOY, ([{'op': 'replace', 'path': '/spec/nothere', 'value': 1}], {"kind": "Deployment"})),
    targeted("json6902_remove_missing_error", DEPLOY, ([{'op': 'remove', 'path': '/spec/nothere'}], {"kind": "Deployment"})),
    targeted("json6902_add_missing_parent_error", DEPLOY, ([{'op': 'add', 'path': '/spec/no/where', 'value': 1}], {"kind": "Deployment"})),
    targeted("json6902_index_out_of_range_error", DEPLOY, ([{'op': 'add', 'path': '/spec/template/spec/containers/5', 'value': {}}], {"kind": "Deployment"})),
    targeted("json6902_test_failure_error", DEPLOY, ([{'op': 'test', 'path': '/metadata/name', 'value': 'other'}], {"kind": "Deployment"})),
    targeted("json6902_add_replaces_existing", DEPLOY, ([{'op': 'add', 'path': '/spec/strategy', 'value': {'type': 'RollingUpdate'}}, {'op': 'add', 'path': '/metadata/labels/new', 'value': 'x'}], {"kind": "Deployment"})),
    targeted("smp_with_target_multiple", """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: a
spec:
  template:
    spec:
      containers:
      - name: c
        image: a
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: b
spec:
  template:
    spec:
      containers:
      - name: c
        image: b
""", ("""apiVersion: apps/v1
kind: Deployment
metadata:
  name: ignored
spec:
  template:
    spec:
      containers:
      - name: c
        imagePullPolicy: Always
      - name: sidecar
        image: s
""", {"kind": "Deployment"})),
]

REPL_RES = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: src
  labels: {a: b}
data:
  str5: "5"
  word: hello
  image: registry.example.com/team/app:v2
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels: {role: target}
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: app
        image: app:1
        args: [a, b]
        env:
        - name: HOST
          value: old.example.com
      - name: myapp
        image: app:1
        args: [c, d]
      - name: other
        image: o
        args: [e, f]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: skip
  labels: {role: skip}
spec:
  replicas: 2
"""


def repl(name, resources, replacements):
    return {"name": name, "kind": "replacements", "resources": resources, "kustomization": {"replacements": replacements}}


CASES += [
    repl("repl_types_create_wildcard_regex", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.str5"},
         "targets": [{"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.replicas", "spec.template.spec.containers.[name=app].image",
                                     "spec.template.metadata.labels.created", "spec.template.spec.containers.*.args.1"],
                      "options": {"create": True}}]},
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "metadata.labels"},
         "targets": [{"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.template.metadata.annotations", "spec.template.spec.containers.[name=other].name"],
                      "options": {"create": True}}]},
    ]),
    repl("repl_delimiters", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.image", "options": {"delimiter": ":", "index": 1}},
         "targets": [{"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.template.spec.containers.[name=other].image"],
                      "options": {"delimiter": ":", "index": 1}}]},
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.template.spec.containers.[name=app].env.[name=HOST].value"],
                      "options": {"delimiter": ".", "index": 0}},
                     {"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.template.spec.containers.0.image"],
                      "options": {"delimiter": ":", "index": -1}},
                     {"select": {"kind": "Deployment", "name": "app"},
                      "fieldPaths": ["spec.template.spec.containers.2.image"],
                      "options": {"delimiter": "/", "index": 9}}]},
    ]),
    repl("repl_select_reject_labels", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"kind": "Deployment"}, "reject": [{"labelSelector": "role=skip"}],
                      "fieldPaths": ["metadata.annotations.w"], "options": {"create": True}},
                     {"select": {"labelSelector": "role"}, "reject": [{"name": "app"}],
                      "fieldPaths": ["metadata.annotations.x"], "options": {"create": True}}]},
    ]),
    repl("repl_default_fieldpaths", REPL_RES, [
        {"source": {"kind": "Deployment", "name": "skip"},
         "targets": [{"select": {"kind": "ConfigMap"}, "fieldPaths": ["data.word"]}]},
    ]),
    repl("repl_create_list_element", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"name": "skip"},
                      "fieldPaths": ["spec.template.spec.containers.[name=made].image"], "options": {"create": True}}]},
    ]),
    repl("repl_missing_target_field_error", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"kind": "Deployment"}, "fieldPaths": ["spec.nothere"]}]},
    ]),
    repl("repl_missing_source_field_error", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.nothere"},
         "targets": [{"select": {"kind": "Deployment"}, "fieldPaths": ["metadata.name"]}]},
    ]),
    repl("repl_ambiguous_source_error", REPL_RES, [
        {"source": {"kind": "Deployment"},
         "targets": [{"select": {"kind": "ConfigMap"}, "fieldPaths": ["data.word"]}]},
    ]),
    repl("repl_no_source_error", REPL_RES, [
        {"source": {"kind": "Secret", "name": "x"},
         "targets": [{"select": {"kind": "ConfigMap"}, "fieldPaths": ["data.word"]}]},
    ]),
    repl("repl_bad_type_error", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"kind": "Deployment", "name": "app"}, "fieldPaths": ["spec.replicas"]}]},
    ]),
]

VARS_RES = """
apiVersion: v1
kind: Service
metadata:
  name: my-svc
  namespace: ns1
spec:
  ports:
  - port: 8080
    targetPort: $(PORT)
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels:
    svc: $(SVC)
  annotations:
    price: $$5 and $(SVC)
spec:
  replicas: 2
  template:
    metadata:
      annotations:
        port: $(PORT)
    spec:
      containers:
      - name: app
        image: app
        command: [run, --svc=$(SVC), $(UNKNOWN), "$(", "cost $$"]
        args: ["$(PORT)", "$(REPLICAS)x"]
        env:
        - name: A
          value: http://$(SVC).$(NS):$(PORT)
        - name: B
          value: $(PORT)
        - name: C
          value: not touched $(SVC)x
        volumeMounts:
        - mountPath: /data/$(SVC)
          name: d
      volumes:
      - name: d
        nfs:
          server: $(SVC)
          path: $(SVC)
"""


def varcase(name, resources, vars):
    return {"name": name, "kind": "vars", "resources": resources, "kustomization": {"vars": vars}}


CASES += [
    varcase("vars_basic", VARS_RES, [
        {"name": "SVC", "objref": {"kind": "Service", "name": "my-svc", "apiVersion": "v1"}},
        {"name": "NS", "objref": {"kind": "Service", "name": "my-svc", "apiVersion": "v1"}, "fieldref": {"fieldpath": "metadata.namespace"}},
        {"name": "PORT", "objref": {"kind": "Service", "name": "my-svc", "apiVersion": "v1"}, "fieldref": {"fieldpath": "spec.ports[0].port"}},
        {"name": "REPLICAS", "objref": {"kind": "Deployment", "name": "app", "apiVersion": "apps/v1"}, "fieldref": {"fieldpath": "spec.replicas"}},
    ]),
    varcase("vars_no_apiversion_error", VARS_RES, [
        {"name": "SVC", "objref": {"kind": "Service", "name": "my-svc"}},
    ]),
    varcase("vars_namespace_mismatch_error", VARS_RES, [
        {"name": "SVC", "objref": {"kind": "Service", "name": "my-svc", "apiVersion": "v1", "namespace": "other"}},
    ]),
    varcase("vars_missing_field_error", VARS_RES, [
        {"name": "SVC", "objref": {"kind": "Service", "name": "my-svc", "apiVersion": "v1"}, "fieldref": {"fieldpath": "spec.nothere"}},
    ]),
]

CASES += [
    smp("smp_target_explicit_nulls_kept", """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution: null
      containers:
      - name: app
        image: a
        resources:
          limits: ~
""", HEAD + """spec:
  replicas: 3
"""),
    repl("repl_empty_string_source", """
apiVersion: v1
kind: ConfigMap
metadata:
  name: src
data:
  empty: ""
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dst
data:
  v: placeholder
""", [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.empty"},
         "targets": [{"select": {"name": "dst"}, "fieldPaths": ["data.v"]}]},
    ]),
]


def _fuzz_lists(seed, n):
    """Random container/env/port/finalizer lists and patches (fixed seed), one Deployment each."""
    import random
    rnd = random.Random(seed)
    names = ["a", "b", "c", "d"]

    def env(allow_directive):
        out = []
        for _ in range(rnd.randint(0, 3)):
            e = {"name": rnd.choice(["X", "Y", "Z"])}
            r = rnd.random()
            if allow_directive and r < 0.15:
                e["$patch"] = "delete"
            elif allow_directive and r < 0.2:
                e["$patch"] = "replace"
                e["value"] = str(rnd.randint(0, 9))
            else:
                e["value"] = str(rnd.randint(0, 9))
            out.append(e)
        return out

    def ports():
        out = []
        for _ in range(rnd.randint(0, 3)):
            p = {"containerPort": rnd.choice([80, 81, 82])}
            if rnd.random() < 0.4:
                p["protocol"] = rnd.choice(["TCP", "UDP"])
            if rnd.random() < 0.5:
                p["name"] = rnd.choice(["p", "q"])
            out.append(p)
        return out

    def containers(patch):
        out = []
        for _ in range(rnd.randint(0, 3)):
            c = {"name": rnd.choice(names)}
            if rnd.random() < 0.6:
                c["image"] = rnd.choice(["i1", "i2"])
            if rnd.random() < 0.5:
                c["env"] = env(patch)
            if rnd.random() < 0.3:
                c["ports"] = ports()
            if rnd.random() < 0.2:
                c["args"] = [rnd.choice(["x", "y"])]
            if patch and rnd.random() < 0.1:
                c = {"name": c["name"], "$patch": "delete"}
            out.append(c)
        if patch and rnd.random() < 0.1:
            out.insert(0, {"$patch": rnd.choice(["replace", "merge"])})
        return out

    docs, patches = [], []
    for i in range(n):
        name = "d%d" % i
        fin = rnd.sample(["f1", "f2", "f3"], rnd.randint(0, 3))
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": name, **({"finalizers": fin} if fin else {})},
                     "spec": {"template": {"spec": {"containers": containers(False)}}}})
        pspec = {}
        if rnd.random() < 0.9:
            pspec["containers"] = containers(True)
        if rnd.random() < 0.3:
            pspec["initContainers"] = containers(True)
        pmeta = {"name": name}
        if rnd.random() < 0.3:
            pmeta["finalizers"] = rnd.sample(["f1", "f3", "f4"], rnd.randint(1, 2))
        patches.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": pmeta,
                        "spec": {"template": {"spec": pspec}}})
    import yaml as _y
    return (_y.safe_dump_all(docs, sort_keys=False), [_y.safe_dump(p, sort_keys=False) for p in patches])


_res, _patches = _fuzz_lists(7, 80)
CASES.append(smp("smp_random_lists", _res, *_patches))


def _fuzz_services(seed, n):
    """Random Service port lists (merge key port+protocol) and patches with directives."""
    import random
    import yaml as _y
    rnd = random.Random(seed)

    def ports(patch):
        out = []
        for _ in range(rnd.randint(0, 4)):
            p = {"port": rnd.choice([80, 81, 82])}
            if rnd.random() < 0.5:
                p["protocol"] = rnd.choice(["TCP", "UDP"])
            p["targetPort"] = rnd.randint(1, 9)
            if patch and rnd.random() < 0.1:
                p["$patch"] = "delete"
            if rnd.random() < 0.1:
                del p["port"]
            out.append(p)
        return out

    docs, patches = [], []
    for i in range(n):
        name = "s%d" % i
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                     "spec": {"ports": ports(False), **({"selector": {"a": "b"}} if rnd.random() < 0.5 else {})}})
        spec = {"ports": ports(True)}
        if rnd.random() < 0.2:
            spec["selector"] = None
        patches.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    return (_y.safe_dump_all(docs, sort_keys=False), [_y.safe_dump(p, sort_keys=False) for p in patches])


_res, _patches = _fuzz_lists(11, 120)
CASES.append(smp("smp_random_lists_2", _res, *_patches))
_res, _patches = _fuzz_services(5, 120)
CASES.append(smp("smp_random_service_ports", _res, *_patches))


CASES += [
    repl("repl_path_syntax", """
apiVersion: v1
kind: ConfigMap
metadata:
  name: src
  annotations:
    a.b/c: dotted
data:
  list: placeholder
spec:
  items: [x, y, z]
  objs:
  - name: one
    v: 1
  - name: two
    v: 2
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dst
  annotations:
    x.y: old
data:
  k: old
spec:
  args: [--a, --b, --c]
  objs:
  - name: one
  - name: two
""", [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "metadata.annotations.a\\.b/c"},
         "targets": [{"select": {"name": "dst"}, "fieldPaths": ["metadata.annotations.x\\.y", "data.[file.name]", "spec.args.[=--b]"],
                      "options": {"create": True}}]},
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "spec.objs.[name=two].v"},
         "targets": [{"select": {"name": "dst"}, "fieldPaths": ["spec.objs.[name=t.*].v", "spec.args.3", "spec.objs.2.name"],
                      "options": {"create": True}}]},
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "spec.items.1"},
         "targets": [{"select": {"name": "dst"}, "fieldPaths": ["data.k"]}]},
    ]),
    repl("repl_index_out_of_range_error", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.word"},
         "targets": [{"select": {"name": "app"}, "fieldPaths": ["spec.template.spec.containers.5.image"]}]},
    ]),
    repl("repl_source_delimiter_out_of_range_error", REPL_RES, [
        {"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.image", "options": {"delimiter": ":", "index": 5}},
         "targets": [{"select": {"name": "app"}, "fieldPaths": ["metadata.name"]}]},
    ]),
    repl("repl_select_namespace_and_version", """
apiVersion: v1
kind: ConfigMap
metadata:
  name: src
  namespace: a
data:
  v: fromA
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: src
  namespace: b
data:
  v: fromB
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dst
data:
  v: old
  w: old
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dst2
  namespace: default
data:
  v: old
""", [
        {"source": {"kind": "ConfigMap", "name": "src", "namespace": "b", "version": "v1", "fieldPath": "data.v"},
         "targets": [{"select": {"namespace": "default", "kind": "ConfigMap"}, "fieldPaths": ["data.v"]},
                     {"select": {"name": "dst", "version": "v2"}, "fieldPaths": ["data.w"]}]},
    ]),
]


def _fuzz_mixed(seed, n):
    """Random pod specs mixing maps, nulls, directives, volumes, tolerations and finalizers."""
    import random
    import yaml as _y
    rnd = random.Random(seed)

    def maybe(p):
        return rnd.random() < p

    def small_map(patch):
        m = {}
        for k in rnd.sample(["x", "y", "z"], rnd.randint(0, 3)):
            r = rnd.random()
            if patch and r < 0.15:
                m[k] = None
            elif k == "y":
                m[k] = {"in": rnd.choice(["1", "2"])}
                if patch and r < 0.3:
                    m[k]["$patch"] = rnd.choice(["replace", "delete"])
            else:
                m[k] = rnd.choice(["a", "b"])
        if patch and maybe(0.15):
            m["$patch"] = rnd.choice(["replace", "delete", "merge"])
        return m

    def volumes(patch):
        out = []
        for _ in range(rnd.randint(0, 3)):
            v = {"name": rnd.choice(["v1", "v2", "v3"])}
            if maybe(0.5):
                v["emptyDir"] = small_map(patch)
            else:
                v["configMap"] = {"name": rnd.choice(["c1", "c2"])}
            if patch and maybe(0.1):
                v["$patch"] = rnd.choice(["delete", "replace"])
            out.append(v)
        if patch and maybe(0.1):
            out.append({"$patch": rnd.choice(["replace", "delete"])})
        return out

    def podspec(patch):
        s = {}
        if maybe(0.6):
            s["volumes"] = volumes(patch)
        if maybe(0.4):
            s["tolerations"] = [{"key": rnd.choice(["k1", "k2"])} for _ in range(rnd.randint(0, 2))]
        if maybe(0.5):
            s["nodeSelector"] = small_map(patch)
        if maybe(0.3):
            s["securityContext"] = {"runAsUser": rnd.randint(1, 3)} if not (patch and maybe(0.3)) else None
        if maybe(0.5):
            c = {"name": "app"}
            if maybe(0.5):
                c["resources"] = {"limits": small_map(patch)}
            if maybe(0.4):
                c["volumeMounts"] = [{"mountPath": rnd.choice(["/a", "/b"]), "name": rnd.choice(["v1", "v2"])}
                                     for _ in range(rnd.randint(0, 2))]
            s["containers"] = [c]
        return s

    docs, patches = [], []
    for i in range(n):
        name = "m%d" % i
        meta = {"name": name}
        if maybe(0.5):
            meta["labels"] = {k: "v" for k in rnd.sample(["l1", "l2"], rnd.randint(1, 2))}
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                     "spec": {"template": {"spec": podspec(False)}}})
        pmeta = {"name": name}
        if maybe(0.4):
            pmeta["labels"] = small_map(True)
        patches.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": pmeta,
                        "spec": {"template": {"spec": podspec(True)}}})
    return (_y.safe_dump_all(docs, sort_keys=False), [_y.safe_dump(p, sort_keys=False) for p in patches])


_res, _patches = _fuzz_mixed(3, 150)
CASES.append(smp("smp_random_mixed", _res, *_patches))
