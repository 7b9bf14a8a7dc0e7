"""Thin endpoints: parse, authorise, hand off to SynthesisService / WsConnection, return."""
