"""The takeover detector's rules (support/cluster/takeover.py) on objects as the API server returns
them: what counts as the stack reaching an object that was not its own."""

from __future__ import annotations

import copy

from support.cluster.takeover import CRD_TYPE, Held, declared_kept_crds, declared_patches, violations

SECRET = ("v1", "Secret", "team", "hf-token")
POLICY = ("networking.k8s.io/v1", "NetworkPolicy", "team", "default-deny-ingress")


def obj(uid: str = "u1", managers=("kubectl-client-side-apply",), labels=None, owners=()) -> dict:
    return {
        "metadata": {
            "uid": uid,
            "labels": dict(labels or {}),
            "managedFields": [{"manager": m, "operation": "Apply"} for m in managers],
            "ownerReferences": [dict(o) for o in owners],
        }
    }


def held(o: dict) -> Held:
    return Held.of(copy.deepcopy(o))


def test_an_object_left_alone_is_no_violation():
    before = {SECRET: held(obj()), POLICY: held(obj("u2"))}
    after = {
        SECRET: held(obj(managers=("kubectl-client-side-apply", "kube-controller-manager"))),
        POLICY: held(obj("u2")),
    }
    assert violations(before, after, set()) == []


def test_the_providers_field_manager_labels_and_owners_are_each_a_takeover():
    before = {SECRET: held(obj())}
    ssa = held(obj(managers=("kubectl-client-side-apply", "pulumi-kubernetes-2a9c7f1e")))
    assert violations(before, {SECRET: ssa}, set()) == [
        "Secret team/hf-token: gained the field manager pulumi-kubernetes-2a9c7f1e"
    ]
    labelled = held(obj(labels={"app.kubernetes.io/managed-by": "pulumi"}))
    assert violations(before, {SECRET: labelled}, set()) == [
        "Secret team/hf-token: gained app.kubernetes.io/managed-by=pulumi"
    ]
    helm = held(obj(managers=("kubectl-client-side-apply", "pulumi-resource-kubernetes")))
    assert violations(before, {SECRET: helm}, set()) == [
        "Secret team/hf-token: gained the field manager pulumi-resource-kubernetes"
    ]
    owned = held(obj(owners=({"uid": "job-1", "controller": False},)))
    assert violations(before, {SECRET: owned}, set()) == ["Secret team/hf-token: gained owner job-1"]


def test_a_deleted_or_recreated_object_is_a_violation_unless_its_controller_replaces_it():
    before = {SECRET: held(obj()), POLICY: held(obj("u2"))}
    assert violations(before, {POLICY: held(obj("u3"))}, set()) == [
        "NetworkPolicy team/default-deny-ingress: replaced",
        "Secret team/hf-token: deleted",
    ]
    pod = ("v1", "Pod", "team", "worker-0")
    controlled = {pod: held(obj(owners=({"uid": "rs", "controller": True},)))}
    assert violations(controlled, {}, set()) == []


def test_a_declared_patch_may_be_co_owned():
    namespace = ("v1", "Namespace", "", "team")
    before = {namespace: held(obj())}
    after = {namespace: held(obj(managers=("kubectl-client-side-apply", "pulumi-kubernetes-1")))}
    assert violations(before, after, {namespace}) == []
    assert violations(before, after, set()) != []


def test_patches_are_read_from_the_stacks_state():
    state = {
        "deployment": {
            "resources": [
                {"type": "kubernetes:core/v1:NamespacePatch", "outputs": {"metadata": {"name": "team"}}},
                {
                    "type": "kubernetes:core/v1:SecretPatch",
                    "outputs": {
                        "metadata": {"name": "sh.helm.release.v1.kueue.v1", "namespace": "kueue-system"}
                    },
                },
                {
                    "type": "kubernetes:core/v1:Secret",
                    "outputs": {"metadata": {"name": "s", "namespace": "team"}},
                },
                {"type": "pulumi:providers:kubernetes", "outputs": {}},
            ]
        }
    }
    assert declared_patches(state) == {
        ("v1", "Namespace", "", "team"),
        ("v1", "Secret", "kueue-system", "sh.helm.release.v1.kueue.v1"),
    }


def test_only_a_crd_kept_by_trainstack_and_declared_by_the_stack_may_be_taken_over():
    """A CRD another trainstack stack applied and kept (labelled part-of trainstack) is one an install
    takes over, where the stack's state declares it; a CRD without the label is never one."""
    kept, users = "pytorchjobs.kubeflow.org", "widgets.example.com"
    key = lambda name: ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)  # noqa: E731
    before = {
        key(kept): held(obj(labels={"app.kubernetes.io/part-of": "trainstack"})),
        key(users): held(obj("u2")),
    }
    state = {
        "deployment": {
            "resources": [
                {"type": CRD_TYPE, "outputs": {"metadata": {"name": name}}}
                for name in (kept, users, "new.example.com")
            ]
        }
    }
    assert declared_kept_crds(state, before) == {key(kept)}
    assert declared_kept_crds({"deployment": {"resources": []}}, before) == set()
