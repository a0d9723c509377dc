"""A JSON schema for CDI specs, written from the CDI specification (specs-go v1.1.0).

Strict like the CDI library's YAML decoding: unknown keys are invalid. Name patterns follow the CDI
parser. Used by the CDI tests to check every spec we generate.
"""

from typing import Any

from jsonschema import Draft202012Validator

_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$"}
_PATH = {"type": "string", "minLength": 1}
_ENV = {"type": "array", "items": {"type": "string", "pattern": r"^[^=]+=.*$"}}

CDI_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "deviceNode": {
            "type": "object",
            "additionalProperties": False,
            "required": ["path"],
            "properties": {
                "path": _PATH,
                "hostPath": _PATH,
                "type": {"enum": ["b", "c", "u", "p"]},
                "major": {"type": "integer"},
                "minor": {"type": "integer"},
                "fileMode": {"type": "integer", "minimum": 0},
                "permissions": {"type": "string", "pattern": "^[rwm]*$"},
                "uid": {"type": "integer", "minimum": 0},
                "gid": {"type": "integer", "minimum": 0},
            },
        },
        "mount": {
            "type": "object",
            "additionalProperties": False,
            "required": ["hostPath", "containerPath"],
            "properties": {
                "hostPath": _PATH,
                "containerPath": _PATH,
                "options": {"type": "array", "items": {"type": "string"}},
                "type": {"type": "string"},
            },
        },
        "hook": {
            "type": "object",
            "additionalProperties": False,
            "required": ["hookName", "path"],
            "properties": {
                "hookName": {
                    "enum": [
                        "prestart",
                        "createRuntime",
                        "createContainer",
                        "startContainer",
                        "poststart",
                        "poststop",
                    ]
                },
                "path": _PATH,
                "args": {"type": "array", "items": {"type": "string"}},
                "env": _ENV,
                "timeout": {"type": "integer"},
            },
        },
        "containerEdits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "env": _ENV,
                "deviceNodes": {"type": "array", "items": {"$ref": "#/$defs/deviceNode"}},
                "hooks": {"type": "array", "items": {"$ref": "#/$defs/hook"}},
                "mounts": {"type": "array", "items": {"$ref": "#/$defs/mount"}},
                "additionalGids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            },
        },
    },
    "type": "object",
    "additionalProperties": False,
    "required": ["cdiVersion", "kind", "devices"],
    "properties": {
        "cdiVersion": {"enum": ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]},
        "kind": {
            "type": "string",
            "pattern": r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$",
        },
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "containerEdits"],
                "properties": {
                    "name": _NAME,
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    "containerEdits": {"$ref": "#/$defs/containerEdits", "minProperties": 1},
                },
            },
        },
        "containerEdits": {"$ref": "#/$defs/containerEdits"},
    },
}

CDI_VALIDATOR = Draft202012Validator(CDI_SCHEMA)
